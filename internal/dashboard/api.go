package dashboard

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
)

// apiResult is the orchestrator API's answer to an in-process call.
type apiResult struct {
	Status int
	Header http.Header
	Body   []byte
	// Detail and Code come from an error body ({"detail", "error"}).
	Detail string
	Code   string
	// Truncated: the body is only the end of what the API sent.
	Truncated bool
}

func (a apiResult) OK() bool { return a.Status >= 200 && a.Status < 300 }

// decode reads a successful JSON body into v.
func (a apiResult) decode(v any) error { return json.Unmarshal(a.Body, v) }

// fieldPattern finds the request field an API error names.
// ("events[1]" names the field events).
var fieldPattern = regexp.MustCompile(`(?:field|query parameter) "([a-z_]+)(?:\[\d+\])?"`)

// Field is the request field the error names, or "".
func (a apiResult) Field() string {
	if m := fieldPattern.FindStringSubmatch(a.Detail); m != nil {
		return m[1]
	}
	return ""
}

// bufferedResponse collects what the API writes; with tail set, only about
// the last tail bytes are kept (a job's log can be hundreds of megabytes).
type bufferedResponse struct {
	header    http.Header
	status    int
	body      bytes.Buffer
	tail      int
	truncated bool
}

func (b *bufferedResponse) Header() http.Header { return b.header }
func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	n, _ := b.body.Write(p)
	if b.tail > 0 && b.body.Len() > 2*b.tail {
		keep := append([]byte(nil), b.body.Bytes()[b.body.Len()-b.tail:]...)
		b.body.Reset()
		b.body.Write(keep)
		b.truncated = true
	}
	return n, nil
}
func (b *bufferedResponse) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

// apiRequest builds a request to the API from the browser's request r: same
// peer address, host and TLS state (so the API's rate limiting, audit records
// and connection commands see the real client), with p as the caller when p
// is not nil, else with header credentials only.
func apiRequest(r *http.Request, p *auth.Principal, method, target string, body any) *http.Request {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx := r.Context()
	if p != nil {
		ctx = orchestrator.WithPrincipal(ctx, *p)
	}
	req, _ := http.NewRequestWithContext(ctx, method, target, rd)
	req.RemoteAddr, req.Host, req.TLS = r.RemoteAddr, r.Host, r.TLS
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// do serves req with the API and returns its buffered answer.
func (d *Dashboard) do(req *http.Request) apiResult { return d.doTail(req, 0) }

// doTail is do keeping only about the last tail bytes of a long body (0: all).
func (d *Dashboard) doTail(req *http.Request, tail int) apiResult {
	rec := &bufferedResponse{header: http.Header{}, tail: tail}
	d.opt.API.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	res := apiResult{Status: rec.status, Header: rec.header, Body: rec.body.Bytes(), Truncated: rec.truncated}
	if !res.OK() {
		var e struct {
			Detail string `json:"detail"`
			Error  string `json:"error"`
		}
		if json.Unmarshal(res.Body, &e) == nil {
			res.Detail, res.Code = e.Detail, e.Error
		}
		if res.Detail == "" {
			res.Detail = http.StatusText(res.Status)
		}
	}
	return res
}

// call is an API call as the session's principal.
func (d *Dashboard) call(r *http.Request, s *session, method, target string, body any) apiResult {
	return d.do(apiRequest(r, &s.principal, method, target, body))
}
