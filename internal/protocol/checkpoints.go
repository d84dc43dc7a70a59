package protocol

// Checkpoints kept in a job's artifacts (p2). The files of a checkpoint are
// uploaded one by one to the storage endpoint under
// checkpoints/<name>/<path>; the commit, sent last, makes it complete.

// CheckpointFile is one regular file of a checkpoint: its path relative to
// the checkpoint directory, its size and the hex SHA-256 of its bytes.
type CheckpointFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// CheckpointCommit is what a worker sends once every file of a checkpoint
// is uploaded: the orchestrator checks each file against what it stored and
// only then records the checkpoint as complete, keeping the newest Keep of
// the job.
type CheckpointCommit struct {
	Name  string           `json:"name"` // checkpoint-<step>[-suffix]
	Step  int64            `json:"step"`
	Files []CheckpointFile `json:"files"`
	Keep  int              `json:"keep"`
}

// Checkpoint is a complete checkpoint of a job, as committed by one of its
// attempts.
type Checkpoint struct {
	Name      string           `json:"name"`
	Step      int64            `json:"step"`
	Attempt   int              `json:"attempt"`
	Bytes     int64            `json:"bytes"`
	CreatedAt string           `json:"created_at"`
	Files     []CheckpointFile `json:"files"`
}

// CheckpointList answers GET on the checkpoints endpoint: the job's complete
// checkpoints, newest first, and what the job may still store.
type CheckpointList struct {
	Checkpoints []Checkpoint `json:"checkpoints"`
	// MaxObjectBytes, MaxJobBytes and MaxJobObjects are the artifact limits
	// in force; JobBytes is what the job's artifacts are charged now (each
	// file and directory counts a little besides its bytes) and JobObjects
	// how many objects they are.
	MaxObjectBytes int64 `json:"max_object_bytes"`
	MaxJobBytes    int64 `json:"max_job_bytes"`
	MaxJobObjects  int   `json:"max_job_objects"`
	JobBytes       int64 `json:"job_bytes"`
	JobObjects     int   `json:"job_objects"`
}
