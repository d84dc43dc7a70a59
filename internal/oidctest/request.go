package oidctest

import (
	"net/url"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// authRequest is a sign-in the provider was asked for, from the authorize
// request until its code is redeemed.
type authRequest struct {
	id        string
	req       oidc.AuthRequest
	challenge *oidc.CodeChallenge
	issueAs   string  // the client id tokens name instead of the real one, when set
	nonce     *string // replaces the requested nonce when set
	subject   string
	authTime  time.Time
	done      bool
}

func (r *authRequest) GetID() string    { return r.id }
func (r *authRequest) GetACR() string   { return "" }
func (r *authRequest) GetAMR() []string { return []string{"pwd"} }
func (r *authRequest) GetAuthTime() time.Time {
	return r.authTime
}
func (r *authRequest) GetCodeChallenge() *oidc.CodeChallenge { return r.challenge }
func (r *authRequest) GetRedirectURI() string                { return r.req.RedirectURI }
func (r *authRequest) GetResponseType() oidc.ResponseType    { return r.req.ResponseType }
func (r *authRequest) GetResponseMode() oidc.ResponseMode    { return r.req.ResponseMode }
func (r *authRequest) GetScopes() []string                   { return r.req.Scopes }
func (r *authRequest) GetState() string                      { return r.req.State }
func (r *authRequest) GetSubject() string                    { return r.subject }
func (r *authRequest) Done() bool                            { return r.done }

func (r *authRequest) GetAudience() []string { return []string{r.GetClientID()} }

func (r *authRequest) GetClientID() string {
	if r.issueAs != "" {
		return r.issueAs
	}
	return r.req.ClientID
}

func (r *authRequest) GetNonce() string {
	if r.nonce != nil {
		return *r.nonce
	}
	return r.req.Nonce
}

// client is a registered application.
type client struct {
	Client
	s *storage
}

func (c *client) RedirectURIs() []string { return c.Client.RedirectURIs }

// GetID is the id tokens are issued to: the client's own, unless the test
// made the provider misissue them (IssueAs).
func (c *client) GetID() string {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.issueFor == c.ID && c.s.issueAs != "" {
		return c.s.issueAs
	}
	return c.ID
}

func (c *client) PostLogoutRedirectURIs() []string { return nil }

func (c *client) ApplicationType() op.ApplicationType {
	if c.Public {
		return op.ApplicationTypeNative
	}
	return op.ApplicationTypeWeb
}

func (c *client) AuthMethod() oidc.AuthMethod {
	if c.Public {
		return oidc.AuthMethodNone
	}
	return oidc.AuthMethodBasic
}

func (c *client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}

func (c *client) GrantTypes() []oidc.GrantType {
	g := []oidc.GrantType{oidc.GrantTypeCode}
	if c.Device {
		g = append(g, oidc.GrantTypeDeviceCode)
	}
	if c.Refresh {
		g = append(g, oidc.GrantTypeRefreshToken)
	}
	return g
}

func (c *client) LoginURL(id string) string           { return "/login?id=" + url.QueryEscape(id) }
func (c *client) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeBearer }

func (c *client) IDTokenLifetime() time.Duration {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.s.lifetime
}

// DevMode lets loopback http redirect URIs through, as tests use.
func (c *client) DevMode() bool { return true }

func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

func (c *client) IsScopeAllowed(string) bool           { return true }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c *client) ClockSkew() time.Duration             { return 0 }
