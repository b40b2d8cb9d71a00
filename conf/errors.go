package conf

import (
	"cmp"
	"errors"
	"slices"
	"strconv"
	"strings"
)

// FieldError is one problem with one field of a configuration. Load and Parse return every
// problem they find, joined with errors.Join and sorted by line; use errors.As to get the
// first, or Errors to get them all.
//
// Its Error text reads
//
//	conf/example.yaml:12: subsystems[0].namespaces[1].lba_size: 1024 is not a supported LBA size; use 512 or 4096
//
// that is: the file and line, the field path, what is wrong (quoting the bad value), and the fix.
type FieldError struct {
	File   string // the configuration file; "" for a Config built in code
	Line   int    // 1-based line of the field (of the enclosing item when the field is missing); 0 if unknown
	Column int    // 1-based column, 0 if unknown
	Field  string // field path, e.g. "subsystems[0].namespaces[1].lba_size"; "" for the whole file
	Value  string // the offending value as written; "" when the field is missing
	Msg    string // what is wrong
	Fix    string // what to do about it
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":")
			b.WriteString(strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		b.WriteString("line ")
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Fix != "" {
		b.WriteString("; ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// Errors returns every *FieldError in err (which may be a tree built by errors.Join).
func Errors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if fe, ok := err.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// joinSorted orders field errors by position and joins them; nil when there are none.
func joinSorted(errs []*FieldError) error {
	if len(errs) == 0 {
		return nil
	}
	slices.SortStableFunc(errs, func(a, b *FieldError) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	list := make([]error, len(errs))
	for i, e := range errs {
		list[i] = e
	}
	return errors.Join(list...)
}
