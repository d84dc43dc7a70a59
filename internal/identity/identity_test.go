package identity

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
)

func TestMap(t *testing.T) {
	t.Parallel()
	mappings := []config.GroupMapping{
		{Group: "ML-Users", Team: "ml", Role: "viewer"},
		{Group: "cn=ML Leads,ou=Groups,dc=example,dc=com", Team: "ml", Role: "lead", Scopes: []string{"admin.audit"}},
		{Group: "ml-interns", Team: "ml", Role: "member"},
		{Group: "vision", Team: "vision", Role: "member", Scopes: []string{"admin.audit", "admin.workers"}},
		{Group: "ops", Team: "", Role: "admin"},
	}
	for _, tc := range []struct {
		name   string
		groups []string
		want   []Membership
		scopes []string
	}{
		{"none", []string{"marketing"}, nil, nil},
		{"case-insensitive name", []string{"ml-users"}, []Membership{{"ml", "viewer"}}, nil},
		{"highest role per team, whatever the order", []string{"ml-interns", "ML-Users"}, []Membership{{"ml", "member"}}, nil},
		{"DN spaced and cased differently", []string{"CN=ML Leads, OU=groups,DC=Example,DC=com", "ml-users"},
			[]Membership{{"ml", "lead"}}, []string{"admin.audit"}},
		{"several teams, scopes once each", []string{"vision", "cn=ml leads,ou=groups,dc=example,dc=com"},
			[]Membership{{"ml", "lead"}, {"vision", "member"}}, []string{"admin.audit", "admin.workers"}},
		{"fleet admin", []string{"ops"}, []Membership{{"", "admin"}}, nil},
		{"a different DN does not match", []string{"cn=ML Leads,ou=Groups,dc=example,dc=org"}, nil, nil},
		{"a prefix does not match", []string{"ml-users-old"}, nil, nil},
	} {
		got, scopes := Map(tc.groups, mappings)
		if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(scopes, tc.scopes) {
			t.Errorf("%s: Map(%q) = %v %q, want %v %q", tc.name, tc.groups, got, scopes, tc.want, tc.scopes)
		}
	}
}

func TestClaim(t *testing.T) {
	t.Parallel()
	var claims map[string]any
	if err := json.Unmarshal([]byte(`{
		"groups": ["a", "b", 3, null, {"x": 1}, ""],
		"group": "solo",
		"realm_access": {"roles": ["admin", "user"]},
		"https://example.com/groups": ["dotted"],
		"flag": true,
		"deep": {"a": {"b": {"c": "found"}}},
		"empty": [],
		"obj": {"k": "v"}
	}`), &claims); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]string{
		"groups":                     {"a", "b", "3"},
		"group":                      {"solo"},
		"realm_access.roles":         {"admin", "user"},
		"https://example.com/groups": {"dotted"},
		"flag":                       {"true"},
		"deep.a.b.c":                 {"found"},
		"empty":                      nil,
		"obj":                        nil,
		"missing":                    nil,
		"realm_access.missing":       nil,
		"group.x":                    nil,
		"":                           nil,
	} {
		if got := Claim(claims, path); !slices.Equal(got, want) {
			t.Errorf("Claim(%q) = %q, want %q", path, got, want)
		}
	}
	if got := Claim(nil, "groups"); got != nil {
		t.Errorf("Claim(nil) = %q", got)
	}
}

// Claim never panics on any JSON a provider could send, and only returns
// non-empty strings found in it.
func FuzzClaim(f *testing.F) {
	f.Add(`{"groups":["a","b"]}`, "groups")
	f.Add(`{"realm_access":{"roles":["x"]}}`, "realm_access.roles")
	f.Add(`{"a.b":{"c":1}}`, "a.b.c")
	f.Add(`{"a":{"b":[true,null,{"c":"d"}]}}`, "a.b")
	f.Fuzz(func(t *testing.T, doc, path string) {
		var claims map[string]any
		if json.Unmarshal([]byte(doc), &claims) != nil {
			return
		}
		for _, v := range Claim(claims, path) {
			if v == "" || !utf8.ValidString(v) && utf8.ValidString(doc) {
				t.Fatalf("Claim(%s, %q) gave %q", doc, path, v)
			}
		}
	})
}
