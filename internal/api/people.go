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

// PeopleQuery pages GET /api/admin/people; Team, when set, keeps the
// people who hold a role in that team now.
type PeopleQuery struct {
	Limit  int
	Offset int
	Team   string
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

// SignInProviders is GET /api/auth/providers: how people may sign in here.
type SignInProviders struct {
	// OIDC is the single sign-on simpletunerctl login uses; null when
	// the command line cannot sign in with it.
	OIDC *OIDCProvider `json:"oidc"`
	// LDAP: a directory user name and password are taken.
	LDAP bool `json:"ldap"`
}

// OIDCProvider is the OpenID provider and the public client the command
// line signs in with.
type OIDCProvider struct {
	Issuer   string `json:"issuer"`
	ClientID string `json:"client_id"`
	// Scopes are those to ask for ([auth.oidc] scopes).
	Scopes []string `json:"scopes"`
}

// OIDCExchange is POST /api/auth/oidc/exchange: an ID token the provider
// issued to the command line's client, exchanged once for a login token.
type OIDCExchange struct {
	IDToken string `json:"id_token"`
}

// LDAPLogin is POST /api/auth/ldap/login.
type LDAPLogin struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// Login answers a sign-in from the command line: a token that lasts until
// ExpiresAt, shown only here, and who it stands for.
type Login struct {
	Token       string        `json:"token"`
	TokenID     string        `json:"token_id"`
	ExpiresAt   string        `json:"expires_at"`
	Person      PersonSummary `json:"person"`
	Memberships []Membership  `json:"memberships"`
}

// CreatePersonalToken is POST /api/auth/tokens: a person's own token,
// acting as them. ExpiresIn is a duration ("720h", "30d"); empty is
// [auth] personal_token_max_ttl, the most it may be.
type CreatePersonalToken struct {
	Name      string `json:"name"`
	ExpiresIn string `json:"expires_in,omitempty"`
}

// PersonalToken answers CreatePersonalToken: the token is shown only here.
type PersonalToken struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	PersonID  string `json:"person_id"`
	ExpiresAt string `json:"expires_at"`
	Token     string `json:"token"`
}
