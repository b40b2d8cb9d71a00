package rdma

import "testing"

func TestStateNames(t *testing.T) {
	for st, want := range map[reqState]string{stFree: "free", stCore: "core", stWantBuf: "want-buffer", stRead: "read",
		stWantSend: "want-send", stSend: "send", stSend + 1: "reqState(6)"} {
		if got := st.String(); got != want {
			t.Errorf("reqState %d: %q, want %q", st, got, want)
		}
	}
	for st, want := range map[connState]string{stateLive: "live", stateDraining: "draining", stateDead: "dead", 7: "connState(7)"} {
		if got := st.String(); got != want {
			t.Errorf("connState %d: %q, want %q", st, got, want)
		}
	}
	c := &conn{ctxs: make([]*rctx, 8)}
	c.moreCtxs() // 8 allocated
	if got := c.busyContexts(); got != "none" {
		t.Errorf("idle: %q", got)
	}
	c.ctxs[0].state, c.ctxs[2].state, c.ctxs[3].state, c.ctxs[5].state = stSend, stCore, stSend, stRead
	if got := c.busyContexts(); got != "core=1 read=1 send=2" {
		t.Errorf("busy: %q", got)
	}
}
