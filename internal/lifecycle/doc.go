package lifecycle

import (
	"fmt"
	"strings"
)

// Markdown renders the lifecycle for docs/protocol.md: a state diagram
// (Mermaid, readable as text too) and the table of moves. The documentation
// holds exactly this text, so the page cannot drift from the code.
func Markdown() string {
	var b strings.Builder
	b.WriteString("```mermaid\nstateDiagram-v2\n    [*] --> queued: submit\n    [*] --> pending_approval: submit (held by an approval rule)\n    [*] --> waiting: submit (depends on jobs still to end)\n")
	type edge struct{ from, to string }
	labels := map[edge][]string{}
	var order []edge
	for _, m := range Moves {
		e := edge{string(m.From), string(m.To)}
		if _, ok := labels[e]; !ok {
			order = append(order, e)
		}
		labels[e] = append(labels[e], string(m.By))
	}
	for _, e := range order {
		fmt.Fprintf(&b, "    %s --> %s: %s\n", e.from, e.to, strings.Join(labels[e], ", "))
	}
	for _, s := range States {
		if s.Terminal() {
			fmt.Fprintf(&b, "    %s --> [*]\n", s)
		}
	}
	b.WriteString("```\n\n")
	b.WriteString("| from | to | cause | the attempt ends | what happened |\n|---|---|---|---|---|\n")
	for _, m := range Moves {
		ends := string(m.Ends)
		switch {
		case m.From == "queued" && m.By == Claim:
			ends = "(a new attempt begins)"
		case ends == "":
			ends = "—"
		}
		if m.Ack {
			ends += " (acknowledged)"
		}
		if m.MaySpendRetry {
			ends += ", retry spent"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", m.From, m.To, m.By, ends, m.Why)
	}
	b.WriteString("\nCauses, and who brings each about:\n\n")
	for _, c := range Causes {
		fmt.Fprintf(&b, "- `%s`: %s\n", c, c.Who())
	}
	return b.String()
}
