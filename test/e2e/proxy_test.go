package e2e

import (
	"io"
	"net"
	"sync"
	"testing"
)

// partitionProxy forwards TCP to a target until cut: then it drops every open
// connection and black-holes new ones (accepted, never answered), the way a
// network partition looks to the worker.
type partitionProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func newProxy(t *testing.T, target string) *partitionProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partitionProxy{l: l, target: target}
	t.Cleanup(func() { l.Close(); p.setCut(true) })
	go p.serve()
	return p
}

func (p *partitionProxy) url() string { return "http://" + p.l.Addr().String() }

func (p *partitionProxy) serve() {
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
func (p *partitionProxy) pipe(dst io.Writer, src io.Reader) {
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

// setCut starts (true) or ends (false) the partition. While cut, traffic on
// open connections vanishes and new connections hang; when it ends, the
// connections that lost bytes are closed so both sides start afresh.
func (p *partitionProxy) setCut(cut bool) {
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
