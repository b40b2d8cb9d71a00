//go:build !ceph || !linux || !cgo

package main

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	childMain()
	os.Exit(m.Run())
}
