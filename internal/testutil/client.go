package testutil

import "net/http"

// Client is an HTTP client with a transport of its own. An
// httptest.Server's Close also closes the idle connections of
// http.DefaultTransport, and a POST about to reuse one of them then fails
// ("HTTP/1.x transport connection broken: http: CloseIdleConnections
// called") instead of being retried, as a GET would be. Tests that run
// beside others closing their servers send their requests with this one.
var Client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
