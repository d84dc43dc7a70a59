package auth

import (
	"slices"
	"testing"
)

func TestScopes(t *testing.T) {
	t.Parallel()
	all := AllScopes()
	if len(all) != 11 || !slices.Contains(all, ScopeAll) || !slices.Contains(all, ScopeAdminPeople) ||
		!slices.Contains(all, ScopeQueueApprove) || !slices.Contains(all, ScopeAdminApprovals) {
		t.Fatalf("AllScopes() = %v", all)
	}
	all[0] = "mutated"
	if AllScopes()[0] == "mutated" {
		t.Fatal("AllScopes shares its backing array")
	}
	tests := []struct {
		scope string
		valid bool
	}{
		{ScopeAdminWorkers, true},
		{ScopeAdminAudit, true},
		{ScopeAdminWebhooks, true},
		{ScopeQueueSubmit, true},
		{ScopeQueueView, true},
		{ScopeQueueCancel, true},
		{ScopeQueueManage, true},
		{ScopeQueueApprove, true},
		{ScopeAdminApprovals, true},
		{ScopeAll, true},
		{"queue.*", true},
		{"admin.*", true},
		{"root", false},
		{"", false},
		{".*", false},
		{"queue", false},
		{"queue.", false},
		{"jobs.*", false},
		{"queue.view ", false},
		{"QUEUE.VIEW", false},
	}
	for _, tc := range tests {
		if got := ValidScope(tc.scope); got != tc.valid {
			t.Errorf("ValidScope(%q) = %v, want %v", tc.scope, got, tc.valid)
		}
	}
}

func TestPrincipalHas(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		scopes []string
		scope  string
		want   bool
	}{
		{"exact", []string{ScopeQueueView}, ScopeQueueView, true},
		{"other", []string{ScopeQueueView}, ScopeQueueCancel, false},
		{"none", nil, ScopeQueueView, false},
		{"star", []string{ScopeAll}, ScopeAdminWorkers, true},
		{"star grants star", []string{ScopeAll}, ScopeAll, true},
		{"family", []string{"queue.*"}, ScopeQueueManage, true},
		{"family is not star", []string{"queue.*"}, ScopeAll, false},
		{"family other", []string{"queue.*"}, ScopeAdminAudit, false},
		{"family needs dot", []string{"queue.*"}, "queueX", false},
		{"family bare", []string{"queue.*"}, "queue", false},
		{"prefix is not wildcard", []string{"queue"}, ScopeQueueView, false},
		{"several", []string{ScopeAdminAudit, ScopeQueueSubmit}, ScopeQueueSubmit, true},
		{"view is not star", []string{ScopeQueueView}, ScopeAll, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := Principal{Kind: KindAdminToken, ID: "tok_1", Scopes: tc.scopes}
			if got := p.Has(tc.scope); got != tc.want {
				t.Errorf("%v.Has(%q) = %v, want %v", tc.scopes, tc.scope, got, tc.want)
			}
		})
	}
}

func TestActorAndLocalPrincipal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p    Principal
		want string
	}{
		{Principal{Kind: KindAdminToken, ID: "tok_abc"}, "admin:tok_abc"},
		{LocalPrincipal(1000, true), "local:uid=1000"},
		{LocalPrincipal(0, false), "local:uid=0"},
		{Principal{}, "anonymous"},
	}
	for _, tc := range tests {
		if got := tc.p.Actor(); got != tc.want {
			t.Errorf("%+v.Actor() = %q, want %q", tc.p, got, tc.want)
		}
	}
	if p := LocalPrincipal(42, true); !p.Has(ScopeAdminWorkers) || !p.Has(ScopeAll) || p.Kind != KindLocal || p.ID != "uid=42" {
		t.Errorf("allowed local principal: %+v", p)
	}
	if p := LocalPrincipal(42, false); p.Has(ScopeQueueView) {
		t.Errorf("refused local principal has scopes: %+v", p)
	}
}
