package oidctest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// storage is the provider's state, all in memory behind one lock: the
// clients, the people who can sign in, the requests in progress, the codes
// and tokens handed out and the signing keys.
type storage struct {
	mu        sync.Mutex
	clients   map[string]*client
	users     map[string]User // by user name
	requests  map[string]*authRequest
	codes     map[string]string // code → request id
	tokens    map[string]accessToken
	refreshes map[string]*refreshRequest              // by refresh token; each is used once
	devices   map[string]*op.DeviceAuthorizationState // by device code
	userCodes map[string]string                       // user code → device code

	signing   *signingKey   // the key new tokens are signed with
	published []*signingKey // the keys the JWKS lists (the current one and those rotated out)
	forge     *signingKey   // when set, tokens are signed with this key, which is never published

	issueFor string // this client's tokens are issued as if to issueAs
	issueAs  string
	nonce    *string       // when set, replaces every ID token's nonce
	lifetime time.Duration // ID token lifetime (may be negative: born expired)
}

type accessToken struct {
	subject, clientID string
	scopes            []string
	expires           time.Time
}

func newStorage(clients []Client, users []User) (*storage, error) {
	s := &storage{clients: map[string]*client{}, users: map[string]User{}, requests: map[string]*authRequest{},
		codes: map[string]string{}, tokens: map[string]accessToken{}, refreshes: map[string]*refreshRequest{}, devices: map[string]*op.DeviceAuthorizationState{},
		userCodes: map[string]string{}, lifetime: 5 * time.Minute}
	for _, c := range clients {
		s.clients[c.ID] = &client{Client: c, s: s}
	}
	for _, u := range users {
		s.users[u.Username] = u
	}
	return s, s.rotate()
}

// rotate makes a new signing key; the old one stays published, so tokens
// it signed still verify.
func (s *storage) rotate() error {
	k, err := newSigningKey()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signing = k
	s.published = append(s.published, k)
	return nil
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// userBySubject finds a user; the caller holds mu.
func (s *storage) userBySubject(sub string) (User, bool) {
	for _, u := range s.users {
		if u.Subject == sub {
			return u, true
		}
	}
	return User{}, false
}

// checkLogin marks the request signed in by the user with this password.
func (s *storage) checkLogin(requestID, username, password string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.requests[requestID]
	if !ok {
		return errors.New("unknown sign-in request")
	}
	u, ok := s.users[username]
	if !ok || u.Password != password {
		return errors.New("wrong user name or password")
	}
	r.subject, r.authTime, r.done = u.Subject, time.Now(), true
	return nil
}

func (s *storage) request(id string) (*authRequest, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.requests[id]
	return r, ok
}

// --- op.AuthStorage

func (s *storage) CreateAuthRequest(_ context.Context, req *oidc.AuthRequest, userID string) (op.AuthRequest, error) {
	if slices.Contains(req.Prompt, oidc.PromptNone) {
		return nil, oidc.ErrLoginRequired()
	}
	r := &authRequest{id: randomID(), req: *req, subject: userID}
	if req.CodeChallenge != "" {
		r.challenge = &oidc.CodeChallenge{Challenge: req.CodeChallenge, Method: req.CodeChallengeMethod}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r.nonce = s.nonce
	if req.ClientID == s.issueFor {
		r.issueAs = s.issueAs
	}
	s.requests[r.id] = r
	return r, nil
}

func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	if r, ok := s.request(id); ok {
		return r, nil
	}
	return nil, errors.New("auth request not found")
}

func (s *storage) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	id, ok := s.codes[code]
	s.mu.Unlock()
	if !ok {
		return nil, errors.New("code unknown or used")
	}
	return s.AuthRequestByID(ctx, id)
}

func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.codes[code] = id
	return nil
}

// DeleteAuthRequest forgets the request and its code: a code is used once.
func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.requests, id)
	for code, rid := range s.codes {
		if rid == id {
			delete(s.codes, code)
		}
	}
	return nil
}

func (s *storage) CreateAccessToken(_ context.Context, req op.TokenRequest) (string, time.Time, error) {
	t := accessToken{subject: req.GetSubject(), scopes: req.GetScopes(), expires: time.Now().Add(5 * time.Minute)}
	if c, ok := req.(interface{ GetClientID() string }); ok {
		t.clientID = c.GetClientID()
	}
	id := randomID()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[id] = t
	return id, t.expires, nil
}

// refreshRequest is what a refresh token was issued for.
type refreshRequest struct {
	subject, clientID string
	scopes            []string
	amr               []string
	authTime          time.Time
}

func (r *refreshRequest) GetAMR() []string                 { return r.amr }
func (r *refreshRequest) GetAudience() []string            { return []string{r.clientID} }
func (r *refreshRequest) GetAuthTime() time.Time           { return r.authTime }
func (r *refreshRequest) GetClientID() string              { return r.clientID }
func (r *refreshRequest) GetScopes() []string              { return r.scopes }
func (r *refreshRequest) GetSubject() string               { return r.subject }
func (r *refreshRequest) SetCurrentScopes(scopes []string) { r.scopes = scopes }

// CreateAccessAndRefreshTokens issues an access token and a new refresh
// token; the one presented (when refreshing) is used up.
func (s *storage) CreateAccessAndRefreshTokens(ctx context.Context, req op.TokenRequest, current string) (string, string, time.Time, error) {
	id, expires, err := s.CreateAccessToken(ctx, req)
	if err != nil {
		return "", "", time.Time{}, err
	}
	r := &refreshRequest{subject: req.GetSubject(), scopes: req.GetScopes(), amr: []string{"pwd"}, authTime: time.Now()}
	if c, ok := req.(interface{ GetClientID() string }); ok {
		r.clientID = c.GetClientID()
	}
	if d, ok := req.(*op.DeviceAuthorizationState); ok {
		r.clientID = d.ClientID
	}
	refresh := randomID()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.refreshes, current)
	s.refreshes[refresh] = r
	return id, refresh, expires, nil
}

func (s *storage) TokenRequestByRefreshToken(_ context.Context, refresh string) (op.RefreshTokenRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.refreshes[refresh]
	if !ok {
		return nil, op.ErrInvalidRefreshToken
	}
	copied := *r
	return &copied, nil
}

func (s *storage) TerminateSession(context.Context, string, string) error { return nil }

func (s *storage) RevokeToken(_ context.Context, tokenOrID, _, _ string) *oidc.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tokens, tokenOrID)
	return nil
}

func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.forge != nil {
		return s.forge, nil
	}
	return s.signing, nil
}

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]op.Key, 0, len(s.published))
	for _, k := range s.published {
		keys = append(keys, publicKey{k})
	}
	return keys, nil
}

// --- op.OPStorage

func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.clients[id]; ok {
		return c, nil
	}
	if c, ok := s.clients[s.issueFor]; ok && id == s.issueAs {
		return c, nil
	}
	return nil, fmt.Errorf("client %q not found", id)
}

func (s *storage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[id]
	if !ok || c.Public || c.Secret != secret {
		return errors.New("wrong client id or secret")
	}
	return nil
}

func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}

// SetUserinfoFromRequest fills the ID token's claims about the person.
func (s *storage) SetUserinfoFromRequest(_ context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	return s.setUserinfo(info, req.GetSubject(), scopes)
}

func (s *storage) SetUserinfoFromToken(_ context.Context, info *oidc.UserInfo, tokenID, _, _ string) error {
	s.mu.Lock()
	t, ok := s.tokens[tokenID]
	s.mu.Unlock()
	if !ok || time.Now().After(t.expires) {
		return errors.New("access token unknown or expired")
	}
	return s.setUserinfo(info, t.subject, t.scopes)
}

func (s *storage) setUserinfo(info *oidc.UserInfo, subject string, scopes []string) error {
	s.mu.Lock()
	u, ok := s.userBySubject(subject)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("user %q not found", subject)
	}
	info.Subject = u.Subject
	for _, scope := range scopes {
		switch scope {
		case oidc.ScopeEmail:
			info.Email, info.EmailVerified = u.Email, true
		case oidc.ScopeProfile:
			info.Name, info.PreferredUsername = u.Name, u.Username
		}
	}
	// Groups come whatever the scopes, as an IdP's group mapper adds them.
	switch {
	case u.GroupString:
		info.AppendClaims("groups", u.Groups[0])
	case u.Groups != nil:
		info.AppendClaims("groups", u.Groups)
	}
	return nil
}

func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errors.New("introspection is not supported by this test provider")
}

func (s *storage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, nil
}

func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errors.New("JWT profile is not supported by this test provider")
}

func (s *storage) ValidateJWTProfileScopes(_ context.Context, _ string, scopes []string) ([]string, error) {
	return scopes, nil
}

func (s *storage) Health(context.Context) error { return nil }

// --- op.DeviceAuthorizationStorage

func (s *storage) StoreDeviceAuthorization(_ context.Context, clientID, deviceCode, userCode string, expires time.Time, scopes []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.clients[clientID]; !ok {
		return fmt.Errorf("client %q not found", clientID)
	}
	if _, ok := s.userCodes[userCode]; ok {
		return op.ErrDuplicateUserCode
	}
	s.devices[deviceCode] = &op.DeviceAuthorizationState{ClientID: clientID, Audience: []string{clientID}, Scopes: scopes, Expires: expires}
	s.userCodes[userCode] = deviceCode
	return nil
}

func (s *storage) GetDeviceAuthorizatonState(ctx context.Context, clientID, deviceCode string) (*op.DeviceAuthorizationState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.devices[deviceCode]
	if !ok || d.ClientID != clientID {
		return nil, errors.New("device code not found for this client")
	}
	copied := *d
	return &copied, nil
}

// completeDevice approves (or denies) the device whose user code this is,
// for the user with this password.
func (s *storage) completeDevice(userCode, username, password string, deny bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.devices[s.userCodes[userCode]]
	if !ok {
		return errors.New("unknown user code")
	}
	u, ok := s.users[username]
	if !ok || u.Password != password {
		return errors.New("wrong user name or password")
	}
	if deny {
		d.Denied = true
		return nil
	}
	d.Subject, d.AuthTime, d.AMR, d.Done = u.Subject, time.Now(), []string{"pwd"}, true
	return nil
}

// --- keys

type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

func newSigningKey() (*signingKey, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	return &signingKey{id: randomID(), key: k}, nil
}

func (k *signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k *signingKey) Key() any                                    { return k.key }
func (k *signingKey) ID() string                                  { return k.id }

type publicKey struct{ k *signingKey }

func (p publicKey) ID() string                         { return p.k.id }
func (p publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (p publicKey) Use() string                        { return "sig" }
func (p publicKey) Key() any                           { return &p.k.key.PublicKey }
