package e2etest

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards TCP to a target until cut: then it drops every byte on
// open connections and black-holes new ones (accepted, never answered), the
// way a host that lost power or a network partition looks from the other
// side: no FIN, no RST, just silence. A side that closes its socket while the
// cut lasts is not passed on either; every connection is closed when the cut
// ends, so both sides start afresh.
//
// StallStreams is the asymmetric fault: only the orchestrator → worker
// direction of the worker event streams open at that moment goes silent while
// everything else (new streams included) flows, as when a stateful firewall
// or proxy forgets a long-lived connection but keeps its socket open.
type Proxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	healed chan struct{} // closed when the cut ends (or the proxy closes)
	conns  []net.Conn
	links  []*link
	// streams counts the worker event streams opened through the proxy.
	streams int
}

func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{l: l, target: target, healed: make(chan struct{})}
	close(p.healed)
	t.Cleanup(p.Close)
	go p.serve()
	return p
}

func (p *Proxy) URL() string { return "http://" + p.l.Addr().String() }

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// streamRequest starts every worker event stream request.
var streamRequest = []byte("GET /api/workers/stream")

func (p *Proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		cut := p.cut
		p.mu.Unlock()
		if cut {
			continue // hold it open, say nothing
		}
		go func() {
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				return
			}
			l := &link{}
			p.mu.Lock()
			p.conns = append(p.conns, up)
			p.links = append(p.links, l)
			p.mu.Unlock()
			go func() { p.pipe(c, up, l, false); c.Close() }()
			p.pipe(up, c, l, true)
			up.Close()
		}()
	}
}

// link is one proxied connection. A keep-alive connection carries several
// requests; once one of them opens a worker event stream it carries nothing
// else.
type link struct {
	stream  atomic.Bool // a request on it opened a worker event stream
	stalled atomic.Bool // its downstream is dropped
}

// dropping reports whether bytes in one direction of l vanish just now.
func (p *Proxy) dropping(l *link, upstream bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut || (!upstream && l.stalled.Load())
}

// holdWhileCut waits for the cut to end: a side that closed during it must
// not be seen closing by the other.
func (p *Proxy) holdWhileCut() {
	p.mu.Lock()
	cut, healed := p.cut, p.healed
	p.mu.Unlock()
	if cut {
		<-healed
	}
}

// pipe copies one direction of l (upstream: client to target), silently
// dropping everything while cut, and a stalled stream's downstream.
func (p *Proxy) pipe(dst io.Writer, src io.Reader, l *link, upstream bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if upstream && n > 0 && !l.stream.Load() && bytes.HasPrefix(buf[:n], streamRequest) {
			l.stream.Store(true)
			p.mu.Lock()
			p.streams++
			p.mu.Unlock()
		}
		if n > 0 && !p.dropping(l, upstream) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			p.holdWhileCut()
			return
		}
	}
}

// SetCut starts (true) or ends (false) the partition. While cut, traffic on
// open connections vanishes, closes are not passed on and new connections
// hang; when it ends, every connection is closed so both sides start afresh.
func (p *Proxy) SetCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.cut
	p.cut = cut
	switch {
	case cut && !was:
		p.healed = make(chan struct{})
	case was && !cut:
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
		close(p.healed)
	}
}

// StallStreams starts (true) or ends (false) the asymmetric fault: what the
// orchestrator writes on the worker event streams open now is dropped, their
// sockets stay open, and all other traffic flows, streams opened later
// included. Ending it closes nothing: a stream that went silent is for the
// worker to notice.
func (p *Proxy) StallStreams(stall bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.links {
		if l.stream.Load() {
			l.stalled.Store(stall)
		}
	}
}

// Streams is how many worker event streams were opened through the proxy.
func (p *Proxy) Streams() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.streams
}

// Close stops the proxy and closes every connection it holds.
func (p *Proxy) Close() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		p.healed = make(chan struct{})
	}
	p.cut = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	select {
	case <-p.healed:
	default:
		close(p.healed)
	}
}
