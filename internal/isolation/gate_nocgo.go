//go:build !cgo

package isolation

// cGate: a build without cgo has no C gate; RunGate is the gate.
func cGate() (arg string, inC bool) { return GateArg, false }
