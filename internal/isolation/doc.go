// Package isolation walls a training job off from simpletuner-workerd and from
// other jobs, as far as the machine allows, and accounts for what it used.
//
// Three walls, each used where it can be:
//
//   - A cgroup per job. Where a writable cgroup v2 hierarchy is found (from
//     /proc/self/mountinfo), every job starts directly inside a cgroup of its
//     own (clone3 with CLONE_INTO_CGROUP), so every descendant, a setsid or
//     double-forked escaper included, stays in it; ending the job writes
//     cgroup.kill. CPU time comes from cpu.stat; memory limits and the peak
//     come from the v2 memory controller, or from v1 memory/pids hierarchies
//     where a hybrid machine has them there; a job's leader is then forked
//     by a thread that stepped into its v1 cgroups, so it runs inside every
//     one from its first instruction (see LaunchCloneInV1). Without a writable cgroup v2, a
//     job is its own process group (an escaper that calls setsid leaves it).
//   - A uid per job. When workerd may switch users (root, or CAP_SETUID and
//     CAP_SETGID), each job runs with a uid of its own from a configured
//     range and the groups of the configured job user, in a private 0700
//     directory; it cannot read workerd's token, credentials or /proc
//     entries, nor another job's directory or environment. A finished job's
//     directory is locked (owned by root) until an attempt of the same job
//     needs it again.
//   - Default signal dispositions: jobs are started straight from workerd,
//     whose signals are handled, never ignored, so a job's SIGTERM, SIGINT and
//     SIGHUP are at their defaults and a cancel lets it save a checkpoint.
//
// A small reaper process (workerd itself, re-executed) holds a pipe from
// workerd: if workerd dies, even by SIGKILL, the pipe ends and the reaper ends
// every job that is left, so a job never runs unsupervised beside its retry.
package isolation
