package api

// Person is someone who signed in through an identity provider, as
// GET /api/admin/people shows them.
type Person struct {
	ID       string `json:"id"`
	Provider string `json:"provider"`
	Issuer   string `json:"issuer"`
	Subject  string `json:"subject"`
	Username string `json:"username"`
	Email    string `json:"email"`
	Name     string `json:"name"`
	// Groups are the provider's groups at the last sign-in.
	Groups []string `json:"groups"`
	// Overrides are the memberships an admin set; null when none.
	Overrides []Membership `json:"overrides"`
	// Memberships are what the person holds now: their groups through
	// [[auth.groups]], then the overrides.
	Memberships []Membership `json:"memberships"`
	// ExtraScopes are the scopes their groups grant beyond the roles.
	ExtraScopes []string `json:"extra_scopes"`
	CreatedAt   string   `json:"created_at"`
	LastSignIn  string   `json:"last_sign_in"`
	DisabledAt  *string  `json:"disabled_at"`
}

// Membership is a role in a team; team "" with role "admin" is the whole
// fleet, and role "none" (in overrides) takes the person out of the team.
type Membership struct {
	Team string `json:"team"`
	Role string `json:"role"`
}

// PeopleQuery pages GET /api/admin/people.
type PeopleQuery struct {
	Limit  int
	Offset int
}

// PersonList is GET /api/admin/people.
type PersonList struct {
	People []Person `json:"people"`
	Total  int      `json:"total"`
}

// PersonRef names a person in the path.
type PersonRef struct {
	ID string
}

// SetMemberships is PUT /api/admin/people/{id}/memberships: the overrides,
// replacing any before ([] clears them).
type SetMemberships struct {
	ID          string        `json:"-"`
	Memberships *[]Membership `json:"memberships"`
}

// PersonDisabled is POST /api/admin/people/{id}/disable.
type PersonDisabled struct {
	Person        Person `json:"person"`
	TokensRevoked int    `json:"tokens_revoked"`
	SessionsEnded int    `json:"sessions_ended"`
}
