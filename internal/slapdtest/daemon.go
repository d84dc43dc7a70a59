package slapdtest

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-ldap/ldap/v3"

	"github.com/simpletuner/simpletuner-orchestration/internal/testpki"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// daemon is the one slapd process of this test binary.
type daemon struct {
	dir                 string
	ldapPort, ldapsPort int
	caFile              string
	caPool              *x509.CertPool
	rootDN, rootPW      string
	cmd                 *exec.Cmd
	exited              chan struct{}
	logs                *testutil.Buffer
}

// binaries finds slapd and slapadd in sbin (Debian keeps both in /usr/sbin,
// which is not always on a test's PATH) or else on the PATH.
func binaries(sbin string) (slapd, slapadd string, err error) {
	find := func(name string) string {
		if p := filepath.Join(sbin, name); isExec(p) {
			return p
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		return ""
	}
	slapd, slapadd = find("slapd"), find("slapadd")
	if slapd == "" || slapadd == "" {
		return "", "", errors.New(MissingBinary)
	}
	return slapd, slapadd, nil
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// startDaemon writes cn=config and the suffix entry with slapadd, then starts
// slapd on free loopback ports, retrying should a port be taken meanwhile.
func startDaemon(t testing.TB) (*daemon, error) {
	slapd, slapadd, err := binaries("/usr/sbin")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "slapdtest-")
	if err != nil {
		return nil, err
	}
	d := &daemon{dir: dir, rootDN: "cn=admin," + Suffix, rootPW: "admin-" + randomHex(8)}
	if err := d.writeTLS(t); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := d.slapadd(slapadd); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	for try := 0; ; try++ {
		if d.ldapPort, err = testutil.FreePort(); err == nil {
			if d.ldapsPort, err = testutil.FreePort(); err == nil {
				if err = d.run(slapd); err == nil {
					return d, nil
				}
			}
		}
		if try == 2 {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

func (d *daemon) writeTLS(t testing.TB) error {
	ca := testpki.NewCA(t, "slapdtest CA")
	d.caFile = ca.Write(t, d.dir, "ca")
	d.caPool = ca.Pool()
	ca.Server(t).Write(t, d.dir, "server")
	return nil
}

// configLDIF is cn=config: the mdb and memberof modules, the schemas a
// directory of people and groups needs, TLS, and one database whose
// passwords only bind may use.
func (d *daemon) configLDIF() string {
	schemas := ""
	for _, s := range []string{"core", "cosine", "nis", "inetorgperson"} {
		schemas += "include: file:///etc/ldap/schema/" + s + ".ldif\n\n"
	}
	return fmt.Sprintf(`dn: cn=config
objectClass: olcGlobal
cn: config
olcPidFile: %[1]s/slapd.pid
olcTLSCACertificateFile: %[1]s/ca.crt
olcTLSCertificateFile: %[1]s/server.crt
olcTLSCertificateKeyFile: %[1]s/server.key

dn: cn=module{0},cn=config
objectClass: olcModuleList
cn: module{0}
olcModulePath: /usr/lib/ldap
olcModuleLoad: back_mdb
olcModuleLoad: memberof

dn: cn=schema,cn=config
objectClass: olcSchemaConfig
cn: schema

%[2]sdn: olcDatabase={-1}frontend,cn=config
objectClass: olcDatabaseConfig
objectClass: olcFrontendConfig
olcDatabase: {-1}frontend

dn: olcDatabase={0}config,cn=config
objectClass: olcDatabaseConfig
olcDatabase: {0}config
olcAccess: {0}to * by * none

dn: olcDatabase={1}mdb,cn=config
objectClass: olcDatabaseConfig
objectClass: olcMdbConfig
olcDatabase: {1}mdb
olcSuffix: %[3]s
olcRootDN: %[4]s
olcRootPW: %[5]s
olcDbDirectory: %[1]s/data
olcDbMaxSize: 67108864
olcDbNoSync: TRUE
olcAccess: {0}to attrs=userPassword by anonymous auth by * none
olcAccess: {1}to * by * read

dn: olcOverlay={0}memberof,olcDatabase={1}mdb,cn=config
objectClass: olcOverlayConfig
objectClass: olcMemberOf
olcOverlay: {0}memberof
olcMemberOfRefInt: TRUE
`, d.dir, schemas, Suffix, d.rootDN, d.rootPW)
}

func (d *daemon) slapadd(slapadd string) error {
	cfg, data := filepath.Join(d.dir, "slapd.d"), filepath.Join(d.dir, "data")
	for _, p := range []string{cfg, data} {
		if err := os.Mkdir(p, 0o700); err != nil {
			return err
		}
	}
	add := func(db, ldif string) error {
		cmd := exec.Command(slapadd, "-n", db, "-F", cfg)
		cmd.Stdin = strings.NewReader(ldif)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("slapdtest: slapadd -n%s: %v\n%s", db, err, out)
		}
		return nil
	}
	if err := add("0", d.configLDIF()); err != nil {
		return err
	}
	return add("1", "dn: "+Suffix+"\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: example\n")
}

// run starts slapd in the foreground and waits until a rootDSE search over
// ldaps answers, or slapd exits.
func (d *daemon) run(slapd string) error {
	logs := &testutil.Buffer{}
	urls := fmt.Sprintf("ldap://127.0.0.1:%d/ ldaps://127.0.0.1:%d/", d.ldapPort, d.ldapsPort)
	cmd := exec.Command(slapd, "-h", urls, "-F", filepath.Join(d.dir, "slapd.d"), "-d", "0")
	cmd.Stdout, cmd.Stderr = logs, logs
	// Pdeathsig stops the server should the test binary die without cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("slapdtest: start slapd: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	d.cmd, d.exited, d.logs = cmd, exited, logs

	deadline := time.Now().Add(60 * time.Second)
	for {
		err := d.rootDSE()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("slapdtest: slapd exited during start-up:\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.stop()
			return fmt.Errorf("slapdtest: slapd did not answer within 60s: %v\n%s", err, logs.String())
		}
	}
}

// rootDSE reads the root DSE over ldaps, checking the certificate.
func (d *daemon) rootDSE() error {
	conn, err := ldap.DialURL(fmt.Sprintf("ldaps://127.0.0.1:%d", d.ldapsPort),
		ldap.DialWithTLSConfig(tlsConfig(d.caPool)))
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetTimeout(5 * time.Second)
	_, err = conn.Search(ldap.NewSearchRequest("", ldap.ScopeBaseObject, ldap.NeverDerefAliases, 0, 5, false,
		"(objectClass=*)", []string{"namingContexts"}, nil))
	return err
}

// stop ends slapd (SIGTERM lets it close the database) and removes its files.
func (d *daemon) stop() {
	if d.cmd != nil {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(30 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.exited
		}
		d.cmd = nil
	}
	os.RemoveAll(d.dir)
}
