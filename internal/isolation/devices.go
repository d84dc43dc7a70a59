package isolation

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A job given some of a worker's GPUs must not open the others' device files
// (/dev/nvidia3), whatever CUDA_VISIBLE_DEVICES says. cgroup v2 controls
// device access with a small BPF program attached to the cgroup; workerd
// writes one per job that refuses the other GPUs' character devices and
// allows everything else (the unit's DevicePolicy still applies above it).
// Loading it takes CAP_BPF and CAP_NET_ADMIN; without them jobs are steered
// by the visible-devices variables alone, and workerd says so at start.

// charDevice is a character device's numbers.
type charDevice struct{ major, minor uint32 }

// deviceOf reads the numbers of a device file.
func deviceOf(path string) (charDevice, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return charDevice{}, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return charDevice{}, fmt.Errorf("%s is not a character device", path)
	}
	return charDevice{unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))}, nil
}

// bpfInsn is one eBPF instruction as the kernel reads it.
type bpfInsn struct {
	code byte
	regs byte // dst in the low nibble, src in the high one
	off  int16
	imm  int32
}

func (i bpfInsn) bytes() []byte {
	b := make([]byte, 8)
	b[0], b[1] = i.code, i.regs
	binary.LittleEndian.PutUint16(b[2:], uint16(i.off))
	binary.LittleEndian.PutUint32(b[4:], uint32(i.imm))
	return b
}

const (
	opLoadWord = 0x61 // BPF_LDX | BPF_MEM | BPF_W: dst = *(u32 *)(src + off)
	opAndImm   = 0x54 // BPF_ALU | BPF_AND | BPF_K
	opJNEImm   = 0x55 // BPF_JMP | BPF_JNE | BPF_K: if dst != imm goto +off
	opMovImm   = 0xb7 // BPF_ALU64 | BPF_MOV | BPF_K
	opExit     = 0x95 // BPF_JMP | BPF_EXIT
	devChar    = 2    // BPF_DEVCG_DEV_CHAR
)

func regs(dst, src byte) byte { return dst | src<<4 }

// denyProgram refuses the given character devices and allows every other
// access. The context is struct bpf_cgroup_dev_ctx: access_type (device type
// in the low 16 bits), major, minor.
func denyProgram(deny []charDevice) []byte {
	insns := []bpfInsn{
		{code: opLoadWord, regs: regs(2, 1), off: 0}, // r2 = access_type
		{code: opAndImm, regs: regs(2, 0), imm: 0xffff},
		{code: opLoadWord, regs: regs(3, 1), off: 4}, // r3 = major
		{code: opLoadWord, regs: regs(4, 1), off: 8}, // r4 = minor
	}
	for _, d := range deny {
		insns = append(insns,
			bpfInsn{code: opJNEImm, regs: regs(2, 0), off: 4, imm: devChar},
			bpfInsn{code: opJNEImm, regs: regs(3, 0), off: 3, imm: int32(d.major)},
			bpfInsn{code: opJNEImm, regs: regs(4, 0), off: 2, imm: int32(d.minor)},
			bpfInsn{code: opMovImm, regs: regs(0, 0), imm: 0}, // refuse
			bpfInsn{code: opExit},
		)
	}
	insns = append(insns, bpfInsn{code: opMovImm, regs: regs(0, 0), imm: 1}, bpfInsn{code: opExit})
	var out []byte
	for _, i := range insns {
		out = append(out, i.bytes()...)
	}
	return out
}

// attachDenyDevices loads the program refusing deny and attaches it to the
// cgroup open at cgroupFD, beside any program already there (the unit's).
// The attachment lives as long as the cgroup.
func attachDenyDevices(cgroupFD int, deny []charDevice) error {
	prog := denyProgram(deny)
	license := []byte("GPL\x00")
	logBuf := make([]byte, 4096)
	load := struct {
		progType, insnCnt  uint32
		insns, license     uint64
		logLevel, logSize  uint32
		logBuf             uint64
		kernVersion, flags uint32
	}{
		progType: unix.BPF_PROG_TYPE_CGROUP_DEVICE, insnCnt: uint32(len(prog) / 8),
		insns: uint64(uintptr(unsafe.Pointer(&prog[0]))), license: uint64(uintptr(unsafe.Pointer(&license[0]))),
		logLevel: 1, logSize: uint32(len(logBuf)), logBuf: uint64(uintptr(unsafe.Pointer(&logBuf[0]))),
	}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_LOAD, uintptr(unsafe.Pointer(&load)), unsafe.Sizeof(load))
	runtime.KeepAlive(prog)
	runtime.KeepAlive(license)
	if errno != 0 {
		if errno == unix.EPERM {
			return fmt.Errorf("loading the device filter: %w (it needs CAP_BPF and CAP_NET_ADMIN, and the bpf system call)", errno)
		}
		return fmt.Errorf("loading the device filter: %w: %s", errno, cString(logBuf))
	}
	defer syscall.Close(int(fd))
	attach := struct{ targetFD, progFD, attachType, flags, replaceFD uint32 }{
		targetFD: uint32(cgroupFD), progFD: uint32(fd), attachType: unix.BPF_CGROUP_DEVICE, flags: unix.BPF_F_ALLOW_MULTI,
	}
	if _, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_ATTACH, uintptr(unsafe.Pointer(&attach)), unsafe.Sizeof(attach)); errno != 0 {
		return fmt.Errorf("attaching the device filter: %w", errno)
	}
	return nil
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// canFilterDevices tries the device filter once on a throwaway cgroup below
// parent: whether this workerd may restrict its jobs' devices.
func canFilterDevices(parent string) error {
	dir, err := os.MkdirTemp(parent, "probe-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return attachDenyDevices(fd, []charDevice{{major: 0, minor: 0}})
}
