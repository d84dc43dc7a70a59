package oidctest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"github.com/simpletuner/simpletuner-orchestration/internal/oidctest"
)

func discover(t *testing.T, s *oidctest.Server) map[string]any {
	t.Helper()
	resp, err := http.Get(s.URL + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

func endpoint(d map[string]any) oauth2.Endpoint {
	return oauth2.Endpoint{AuthURL: d["authorization_endpoint"].(string), TokenURL: d["token_endpoint"].(string),
		DeviceAuthURL: d["device_authorization_endpoint"].(string)}
}

// The code flow with PKCE, driven over HTTP, ends with an ID token.
func TestCodeFlow(t *testing.T) {
	s := oidctest.Start(t)
	d := discover(t, s)
	if d["issuer"] != s.URL {
		t.Fatalf("issuer %v, want %s", d["issuer"], s.URL)
	}
	cfg := oauth2.Config{ClientID: oidctest.ClientID, ClientSecret: oidctest.ClientSecret, Endpoint: endpoint(d),
		RedirectURL: oidctest.RedirectURI, Scopes: []string{"openid", "profile", "email"}}
	verifier := oauth2.GenerateVerifier()
	back, err := s.SignIn(t.Context(), cfg.AuthCodeURL("st4te", oauth2.S256ChallengeOption(verifier)), "alice", "alice-password")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(back.String(), oidctest.RedirectURI+"?") || back.Query().Get("state") != "st4te" {
		t.Fatalf("sent back to %s", back)
	}
	if _, err := cfg.Exchange(t.Context(), back.Query().Get("code"), oauth2.VerifierOption("wrong-verifier-wrong-verifier-wrong-verifier")); err == nil {
		t.Fatal("code redeemed with the wrong PKCE verifier")
	}
	back, err = s.SignIn(t.Context(), cfg.AuthCodeURL("st4te", oauth2.S256ChallengeOption(verifier)), "alice", "alice-password")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cfg.Exchange(t.Context(), back.Query().Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := tok.Extra("id_token").(string); raw == "" {
		t.Fatal("no id_token")
	}
}

func TestWrongPassword(t *testing.T) {
	s := oidctest.Start(t)
	cfg := oauth2.Config{ClientID: oidctest.ClientID, Endpoint: endpoint(discover(t, s)), RedirectURL: oidctest.RedirectURI, Scopes: []string{"openid"}}
	if _, err := s.SignIn(t.Context(), cfg.AuthCodeURL("x"), "alice", "nope"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong password: %v", err)
	}
}

// The device flow: the device asks for a code, the person approves it on
// the provider's page, the device's poll gets the token.
func TestDeviceFlow(t *testing.T) {
	s := oidctest.Start(t)
	cfg := oauth2.Config{ClientID: oidctest.CLIClientID, Endpoint: endpoint(discover(t, s)), Scopes: []string{"openid", "profile"}}
	da, err := cfg.DeviceAuth(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(da.VerificationURI, s.URL+"/device") {
		t.Fatalf("verification URI %q", da.VerificationURI)
	}
	if err := s.ApproveDevice(t.Context(), da.UserCode, "alice", "alice-password"); err != nil {
		t.Fatal(err)
	}
	tok, err := cfg.DeviceAccessToken(t.Context(), da)
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := tok.Extra("id_token").(string); raw == "" {
		t.Fatal("no id_token")
	}
}
