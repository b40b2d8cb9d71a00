package ratelog

import (
	"fmt"
	"testing"
	"time"
)

func TestLimiterPerKey(t *testing.T) {
	now := time.Unix(1000, 0)
	l := &Limiter{Interval: 10 * time.Second, now: func() time.Time { return now }}
	if ok, n := l.Allow("a"); !ok || n != 0 {
		t.Fatalf("first line of a: %v %d", ok, n)
	}
	if ok, _ := l.Allow("b"); !ok {
		t.Fatal("first line of b suppressed by a's")
	}
	for range 5 {
		if ok, _ := l.Allow("a"); ok {
			t.Fatal("a logged twice within the interval")
		}
	}
	now = now.Add(9 * time.Second)
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("a logged before the interval passed")
	}
	now = now.Add(time.Second)
	if ok, n := l.Allow("a"); !ok || n != 6 {
		t.Fatalf("a after the interval: %v, suppressed %d, want true, 6", ok, n)
	}
	if ok, n := l.Allow("a"); ok || n != 0 {
		t.Fatalf("a again: %v %d", ok, n)
	}
}

func TestLimiterBoundedKeys(t *testing.T) {
	now := time.Unix(1000, 0)
	l := &Limiter{now: func() time.Time { return now }}
	for i := range 3 * maxKeys {
		if ok, _ := l.Allow(fmt.Sprint(i)); !ok {
			t.Fatalf("a new key %d was suppressed", i)
		}
	}
	if len(l.keys) > maxKeys {
		t.Fatalf("%d keys remembered, at most %d", len(l.keys), maxKeys)
	}
}
