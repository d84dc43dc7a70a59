package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// safeJobID is what a job id may look like before it names a directory; our
// orchestrator's ids are j_ + base32, upstream's wjob-<hex>.
var safeJobID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// jobFiles are the paths prepared for one attempt.
type jobFiles struct {
	Dir            string // <work_dir>/<job_id>, shared by the attempts of a job so a retry finds checkpoints
	ConfigPath     string // Dir/config.json
	DataloaderPath string // Dir/dataloader.json, "" when the job has no dataloader
}

// jobDir is <work_dir>/<job_id>, for a job id safe to use as a name.
func jobDir(workDir, jobID string) (string, error) {
	if !safeJobID.MatchString(jobID) {
		return "", fmt.Errorf("job id %q is not usable as a directory name", jobID)
	}
	return filepath.Join(workDir, jobID), nil
}

// paths lists the files workerd wrote for the job.
func (f jobFiles) paths() []string {
	out := []string{f.ConfigPath}
	if f.DataloaderPath != "" {
		out = append(out, f.DataloaderPath)
	}
	return out
}

// prepareJobDir writes config.json (and dataloader.json) into the job's
// directory, which exists. When a dataloader is given the config's
// data_backend_config is pointed at dataloader.json, which SimpleTuner's own
// agent leaves out; the path is also in SIMPLETUNER_DATALOADER_PATH.
func prepareJobDir(dir string, ev *protocol.JobSubmitEvent) (jobFiles, error) {
	f := jobFiles{Dir: dir, ConfigPath: filepath.Join(dir, "config.json")}

	cfg := []byte(ev.Config)
	if len(bytes.TrimSpace(cfg)) == 0 || string(bytes.TrimSpace(cfg)) == "null" {
		cfg = []byte("{}")
	}
	if hasJSON(ev.Dataloader) {
		f.DataloaderPath = filepath.Join(dir, "dataloader.json")
		if err := writeJSONFile(f.DataloaderPath, ev.Dataloader); err != nil {
			return jobFiles{}, err
		}
		cfg = pointAtDataloader(cfg, f.DataloaderPath)
	}
	if err := writeJSONFile(f.ConfigPath, cfg); err != nil {
		return jobFiles{}, err
	}
	return f, nil
}

func hasJSON(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && string(t) != "null"
}

// pointAtDataloader sets data_backend_config in a config object, in the key style
// the config already uses (SimpleTuner configs often spell keys as "--flag").
// Anything that is not a JSON object is left alone.
func pointAtDataloader(cfg []byte, path string) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(cfg, &m) != nil || m == nil {
		return cfg
	}
	key := "data_backend_config"
	_, plain := m[key]
	_, flag := m["--"+key]
	switch {
	case flag:
		key = "--" + key
	case plain:
	default:
		for k := range m {
			if strings.HasPrefix(k, "--") {
				key = "--" + key
				break
			}
		}
	}
	v, _ := json.Marshal(path)
	m[key] = v
	out, err := json.Marshal(m)
	if err != nil {
		return cfg
	}
	return out
}

// writeJSONFile writes raw indented (readable for whoever debugs a job) and
// private: configs may hold credentials.
func writeJSONFile(path string, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return fmt.Errorf("%s: the orchestrator sent invalid JSON: %w", filepath.Base(path), err)
	}
	buf.WriteByte('\n')
	// The directory may hold what an earlier attempt left, running as
	// another uid: a stale temporary file, or a link planted where workerd
	// writes. The temporary file is made afresh, never opened through a link.
	tmp := path + ".tmp"
	if err := os.Remove(tmp); err != nil && !os.IsNotExist(err) {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// inheritedEnv is what a job inherits of workerd's own environment, besides
// job.pass_env: what any program needs to run (PATH, the locale, the time
// zone, the temporary directory, and HOME, USER and LOGNAME, which a job that
// runs as a uid of its own gets for that uid instead), and the GPU variables
// that describe this machine (CUDA_*, NCCL_*, NVIDIA_*, and ROCR_*, HIP_*,
// HSA_* for AMD). Nothing else: workerd may have been started from an
// admin's shell that holds admin tokens, the orchestrator's URL, a Python
// environment or proxy settings, and none of that is the job's business
// unless job.pass_env or job.env says so.
var inheritedEnv = []string{"PATH", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR", "HOME", "USER", "LOGNAME",
	"CUDA_*", "NCCL_*", "NVIDIA_*", "ROCR_*", "HIP_*", "HSA_*"}

// inherits reports whether a job inherits the variable name of workerd's
// environment: it is on the allowlist or in pass, and not a secret's name.
func inherits(name string, pass []string) bool {
	if config.SecretLikeName(name) {
		return false
	}
	match := func(p string) bool { ok, _ := path.Match(p, name); return ok }
	return slices.ContainsFunc(inheritedEnv, match) || slices.ContainsFunc(pass, match)
}

// jobEnvInput is what jobEnv needs.
type jobEnvInput struct {
	Base            []string          // the worker's environment (os.Environ)
	Pass            []string          // [job] pass_env: more of Base to pass on
	Extra           map[string]string // [job] env from workerd.toml
	Token           string            // the worker token: never passed on, under any name
	Files           jobFiles
	Event           *protocol.JobSubmitEvent
	OrchestratorURL string
	GPUs            map[string]string // CUDA_VISIBLE_DEVICES and the like; nil leaves the inherited values
}

// jobEnv builds the environment of a job (see "What a job sees" in
// simpletuner-workerd(8)): the allowed part of the worker's environment (see
// inherits), then [job] env, then the job's own variables, which win. No
// variable whose value holds the worker token is passed, whatever its name.
func jobEnv(in jobEnvInput) []string {
	vars := map[string]string{}
	for _, kv := range in.Base {
		k, v, ok := strings.Cut(kv, "=")
		if ok && inherits(k, in.Pass) {
			vars[k] = v
		}
	}
	for k, v := range in.Extra {
		vars[k] = v
	}
	ev := in.Event
	vars["CONFIG_PATH"] = in.Files.ConfigPath
	vars["SIMPLETUNER_CONFIG_BACKEND"] = "json"
	vars["SIMPLETUNER_UPLOAD_ENDPOINT"] = absURL(in.OrchestratorURL, ev.UploadEndpoint)
	vars["SIMPLETUNER_UPLOAD_TOKEN"] = ev.UploadToken
	vars["SIMPLETUNER_JOB_ID"] = ev.JobID
	vars["SIMPLETUNER_ATTEMPT"] = strconv.Itoa(ev.Attempt)
	if ev.HFToken != "" {
		vars["HF_TOKEN"] = ev.HFToken
	}
	if in.Files.DataloaderPath != "" {
		vars["SIMPLETUNER_DATALOADER_PATH"] = in.Files.DataloaderPath
	}
	for k, v := range in.GPUs {
		vars[k] = v
	}
	if in.Token != "" {
		for k, v := range vars {
			if strings.Contains(v, in.Token) {
				delete(vars, k)
			}
		}
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
