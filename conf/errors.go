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
	Fix    string // what to do about it, in the file's terms
	// FixKeys are the configuration keys Fix names, in order, for front ends that set the
	// fields otherwise (FixText); fixTmpl is Fix with {} in place of each, set by this
	// package with FixKeys. Code that rewrites Fix clears FixKeys.
	FixKeys []FixKey
	fixTmpl string
}

// FixKey is a configuration key that a FieldError's Fix names: to remove or set it
// ("remove size"), or with an example value ("size: 10GiB") or example values of its keys
// ("rbd: {pool: rbd, image: vol1}").
type FixKey struct {
	Field string   // the key's field path, as FieldError.Field
	Value string   // an example value; "" when the fix names the key alone
	Sub   []FixKey // example values of a mapping's keys (with Value "")
}

// FixText is Fix with each of FixKeys written by key: for a front end that names the
// fields otherwise than the file (gonvmf ctl's flags), so that its users read the fix in
// its terms. Fix writes each key as the file does, from the mapping it shares with the
// field at fault (user: gonvmf within rbd; remove size, write rbd.create_size for an rbd
// namespace's size).
func (e *FieldError) FixText(key func(FixKey) string) string {
	if len(e.FixKeys) == 0 || e.fixTmpl == "" {
		return e.Fix
	}
	var b strings.Builder
	rest := e.fixTmpl
	for _, k := range e.FixKeys {
		before, after, _ := strings.Cut(rest, "{}")
		b.WriteString(before)
		b.WriteString(key(k))
		rest = after
	}
	b.WriteString(rest)
	return b.String()
}

// fileKey writes a FixKey of a fix for field as the configuration file does (FixText).
func fileKey(field string) func(FixKey) string {
	return func(k FixKey) string {
		name := relField(field, k.Field)
		switch {
		case len(k.Sub) > 0:
			vals := make([]string, len(k.Sub))
			for i, s := range k.Sub {
				vals[i] = strings.TrimPrefix(s.Field, k.Field+".") + ": " + s.Value
			}
			return name + ": {" + strings.Join(vals, ", ") + "}"
		case k.Value != "":
			return name + ": " + k.Value
		}
		return name
	}
}

// relField is the path of key from the innermost mapping that holds both it and field's
// key ("a.rbd.user" from "a.rbd.pool": "user"; "a.rbd.create_size" from "a.size":
// "rbd.create_size").
func relField(field, key string) string {
	for base := field; base != ""; {
		i := strings.LastIndexByte(base, '.')
		if i < 0 {
			break
		}
		base = base[:i]
		if rest, ok := strings.CutPrefix(key, base+"."); ok {
			return rest
		}
	}
	return key
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
