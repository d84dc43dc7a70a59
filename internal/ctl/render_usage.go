package ctl

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/output"
)

// teamWidth bounds a team's name in the default tables.
const teamWidth = 12

// usage is the report of `usage`: a line on the period and the fleet, a
// row per team, then the GPU-hours of each day with a column per team.
func (r renderer) usage(w io.Writer, u api.Usage) error {
	fmt.Fprintf(w, "%s to %s (UTC): fleet %d GPUs, half-life %s, preemption %s\n\n", u.From, u.To, u.FleetGPUs,
		output.Duration(time.Duration(u.HalfLifeSeconds*float64(time.Second))), onOff(u.Preemption))
	if len(u.Teams) == 0 {
		_, err := fmt.Fprintln(w, "no teams")
		return err
	}
	if err := r.usageTeams(w, u.Teams); err != nil {
		return err
	}
	for _, t := range u.Teams {
		if !t.Configured {
			fmt.Fprintln(w, "* not in [[teams]] any more: scheduled with a share of 1 until its jobs end")
			break
		}
	}
	fmt.Fprintln(w)
	return r.usageDays(w, u.Teams)
}

// usageTeams is a row per team. The default table shows each limit beside
// what it limits ("4/8": 4 GPUs held of at most 8); the wide one gives
// every number its own column.
func (r renderer) usageTeams(w io.Writer, teams []api.TeamUsage) error {
	var t *output.Table
	if r.wide {
		t = output.NewTable("TEAM", "SHARE", "SHARE%", "MAX GPUS", "MAX QUEUED", "BORROW", "RUNNING", "GPUS", "QUEUED",
			"DECAYED GPU-H", "USAGE%", r.style.Header("FAIR SHARE"), "GPU-H")
	} else {
		t = output.NewTable("TEAM", "SHARE", "RUN", "GPUS/MAX", "QUEUED/MAX", "DECAYED", r.style.Header("FAIRSHARE"), "GPU-H")
	}
	for _, u := range teams {
		name := u.Team
		if !u.Configured {
			name += "*"
		}
		fair := r.style.Header(strconv.FormatFloat(u.FairShare, 'f', 3, 64))
		if r.wide {
			t.Row(name, trimFloat(u.Share), pct(u.ShareFraction), limit(u.MaxGPUs), limit(u.MaxQueued), yesNo(u.Borrow),
				strconv.Itoa(u.RunningJobs), strconv.Itoa(u.RunningGPUs), strconv.Itoa(u.QueuedJobs), hours(u.DecayedGPUHours),
				pct(u.UsageFraction), fair, hours(u.GPUHours))
			continue
		}
		t.Row(output.Truncate(name, teamWidth), pct(u.ShareFraction), strconv.Itoa(u.RunningJobs), of(u.RunningGPUs, u.MaxGPUs),
			of(u.QueuedJobs, u.MaxQueued), hours(u.DecayedGPUHours), fair, hours(u.GPUHours))
	}
	return t.Write(w)
}

// usageDays is the GPU-hours of each day, a column per team and a total.
func (r renderer) usageDays(w io.Writer, teams []api.TeamUsage) error {
	head := []string{"DAY"}
	for _, u := range teams {
		name := u.Team
		if !r.wide {
			name = output.Truncate(name, teamWidth)
		}
		head = append(head, strings.ToUpper(name))
	}
	t := output.NewTable(append(head, r.style.Header("TOTAL"))...)
	for i, d := range teams[0].Days {
		row, total := []string{d.Day}, 0.0
		for _, u := range teams {
			h := 0.0
			if i < len(u.Days) {
				h = u.Days[i].GPUHours
			}
			row, total = append(row, hours(h)), total+h
		}
		t.Row(append(row, r.style.Header(hours(total)))...)
	}
	return t.Write(w)
}

// whoami shows the caller; source is where the token came from ("" when
// not known).
func (r renderer) whoami(w io.Writer, me api.Whoami, source string) error {
	rows := [][2]string{{"Name", me.Name}, {"Kind", me.Kind}, {"ID", me.ID}}
	if p := me.Person; p != nil {
		rows = append(rows, [2]string{"User name", p.Username}, [2]string{"Email", p.Email}, [2]string{"Provider", p.Provider})
		roles := make([]string, 0, len(me.Memberships))
		for _, m := range me.Memberships {
			roles = append(roles, first(m.Team, "fleet")+":"+m.Role)
		}
		rows = append(rows, [2]string{"Roles", strings.Join(roles, ", ")})
	}
	rows = append(rows, [][2]string{{"Actor", me.Actor},
		{"Team", first(me.Team, "default")}, {"Scopes", strings.Join(me.Scopes, ", ")},
		{"Max priority", strconv.Itoa(me.MaxPriority)},
	}...)
	if source != "" {
		rows = append(rows, [2]string{"Token", source})
	}
	if me.ExpiresAt != nil {
		rows = append(rows, [2]string{"Expires", *me.ExpiresAt})
	}
	return writeKV(w, rows)
}

// hours is GPU-hours to a tenth.
func hours(h float64) string { return strconv.FormatFloat(h, 'f', 1, 64) }

// pct is a fraction as a percentage to a tenth, without a trailing ".0".
func pct(f float64) string {
	return strings.TrimSuffix(strconv.FormatFloat(f*100, 'f', 1, 64), ".0") + "%"
}

// limit is a team's limit; 0 is none.
func limit(n int) string {
	if n == 0 {
		return "none"
	}
	return strconv.Itoa(n)
}

// of is "held/limit", "held/-" without a limit.
func of(n, most int) string {
	if most == 0 {
		return strconv.Itoa(n) + "/-"
	}
	return strconv.Itoa(n) + "/" + strconv.Itoa(most)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
