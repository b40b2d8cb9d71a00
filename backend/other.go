//go:build !linux

package backend

import "fmt"

func openFile(s Spec) (Backend, error) {
	return nil, fmt.Errorf("backend: file backend %q: %w (linux only)", s.Path, ErrNotSupported)
}

func openBlock(s Spec) (Backend, error) {
	return nil, fmt.Errorf("backend: block backend %q: %w (linux only)", s.Path, ErrNotSupported)
}
