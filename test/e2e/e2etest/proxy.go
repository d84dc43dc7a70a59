package e2etest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP to a target until cut: then it drops every open
// connection and black-holes new ones (accepted, never answered), the way a
// network partition looks to the worker.
type Proxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{l: l, target: target}
	t.Cleanup(p.Close)
	go p.serve()
	return p
}

func (p *Proxy) URL() string { return "http://" + p.l.Addr().String() }

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
			p.mu.Lock()
			p.conns = append(p.conns, up)
			p.mu.Unlock()
			go func() { p.pipe(up, c); up.Close() }()
			p.pipe(c, up)
			c.Close()
		}()
	}
}

// pipe copies src to dst, silently dropping everything while cut.
func (p *Proxy) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			cut := p.cut
			p.mu.Unlock()
			if !cut {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// SetCut starts (true) or ends (false) the partition. While cut, traffic on
// open connections vanishes and new connections hang; when it ends, the
// connections that lost bytes are closed so both sides start afresh.
func (p *Proxy) SetCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.cut
	p.cut = cut
	if was && !cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// Close stops the proxy and closes every connection it holds.
func (p *Proxy) Close() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
