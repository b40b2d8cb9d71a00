//go:build !linux

package conf

import (
	"errors"
	"os"
)

func blockDeviceInfo(*os.File) (uint32, uint64, error) { return 0, 0, errors.ErrUnsupported }
func totalRAM() (Size, bool)                           { return 0, false }
func memlockLimit() (uint64, bool)                     { return 0, false }
func writable(string) error                            { return nil }
