package stage

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/deploycoord/deploycoord/task"
)

// Limits on templates, in bytes.
const (
	// MaxTemplateLen is the longest template text accepted in a config
	// field (bodies may be longer, see MaxBodyTemplateLen).
	MaxTemplateLen = 4 << 10
	// MaxBodyTemplateLen is the longest http body template accepted.
	MaxBodyTemplateLen = 64 << 10
	// maxPrintfWidth caps widths and precisions in printf formats, so that
	// a short template cannot allocate megabytes of padding.
	maxPrintfWidth = 999
)

// Template is a text/template from a stage's config, parsed when the stage
// is compiled and rendered over an Input on every run. A key missing from
// Params or Outputs is an error (missingkey=error), and so is a reference to
// a field Input does not have — that one already when the template is made.
//
// Besides text/template's built-in functions it has json (a value as JSON:
// {{json .Params.version}} renders "1.2.3" with its quotes). define, block and
// template actions are refused; so is range in inline stages. Rendered text
// and the result of every function are capped, so no template can grow
// without bound.
type Template struct {
	field string
	tmpl  *template.Template
	limit int64
}

// NewTemplate parses text as the template of the config field named field
// (e.g. "http.url"; it names the template in error messages). Rendered text
// is capped at env.MaxOutputBytes (MaxOutputBytesDefault when 0). Errors are
// *ConfigError values wrapping ErrInvalid or ErrNotAllowed.
func NewTemplate(field, text string, env Env) (*Template, error) {
	return newTemplate(field, text, env, inputNames, MaxTemplateLen)
}

// inputNames are the names a template may take from its data (an Input).
var inputNames = namesOf(reflect.TypeFor[Input]())

func namesOf(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for i := range t.NumField() {
		if sf := t.Field(i); sf.IsExported() {
			if sf.Anonymous {
				for n := range namesOf(sf.Type) {
					names[n] = true
				}
			}
			names[sf.Name] = true
		}
	}
	for i := range t.NumMethod() {
		names[t.Method(i).Name] = true
	}
	return names
}

func newTemplate(field, text string, env Env, names map[string]bool, maxLen int) (*Template, error) {
	if len(text) > maxLen {
		return nil, invalid(field, "template is %d bytes, limit %d", len(text), maxLen)
	}
	limit := env.MaxOutputBytes
	if limit <= 0 {
		limit = MaxOutputBytesDefault
	}
	t := &Template{field: field, limit: limit}
	tmpl, err := template.New(field).Option("missingkey=error").Funcs(t.funcs()).Parse(text)
	if err != nil {
		return nil, invalid(field, "bad template: %s", clean(err.Error(), 300))
	}
	for _, other := range tmpl.Templates() {
		if other.Name() != field {
			return nil, invalid(field, "bad template: define and block actions are not allowed")
		}
	}
	c := checker{names: names, allowRange: env.Source == SourceOperator, params: env.params}
	if tmpl.Tree != nil {
		if err := c.walk(tmpl.Tree.Root, true); err != nil {
			var ce *ConfigError
			if errors.As(err, &ce) {
				ce.Field = field
				return nil, ce
			}
			return nil, invalid(field, "bad template: %s", err)
		}
	}
	t.tmpl = tmpl
	return t, nil
}

// Render executes the template over in.
func (t *Template) Render(in Input) (string, error) { return t.render(in, t.limit) }

// errTooLong is what capWriter and the capped functions fail with.
var errTooLong = errors.New("rendered text too long")

func (t *Template) render(data any, limit int64) (string, error) {
	w := capWriter{limit: limit}
	if err := t.tmpl.Execute(&w, data); err != nil {
		if errors.Is(err, errTooLong) {
			return "", fmt.Errorf("%s: rendered text exceeds %d bytes", t.field, limit)
		}
		return "", fmt.Errorf("%s: %s", t.field, clean(err.Error(), 400))
	}
	return w.b.String(), nil
}

type capWriter struct {
	b     strings.Builder
	limit int64
}

func (w *capWriter) Write(p []byte) (int, error) {
	if int64(w.b.Len())+int64(len(p)) > w.limit {
		return 0, errTooLong
	}
	return w.b.Write(p)
}

// funcs replaces the built-in functions that can make long strings with
// capped ones (a function's result does not go through capWriter until the
// whole pipeline is done, and escapers nest: urlquery (urlquery x) triples
// twice), and adds json.
func (t *Template) funcs() template.FuncMap {
	capped := func(s string) (string, error) {
		if int64(len(s)) > t.limit {
			return "", errTooLong
		}
		return s, nil
	}
	return template.FuncMap{
		"print":    func(args ...any) (string, error) { return capped(fmt.Sprint(args...)) },
		"println":  func(args ...any) (string, error) { return capped(fmt.Sprintln(args...)) },
		"html":     func(args ...any) (string, error) { return capped(template.HTMLEscaper(args...)) },
		"js":       func(args ...any) (string, error) { return capped(template.JSEscaper(args...)) },
		"urlquery": func(args ...any) (string, error) { return capped(template.URLQueryEscaper(args...)) },
		"printf": func(format string, args ...any) (string, error) {
			if err := checkFormat(format); err != nil {
				return "", err
			}
			return capped(fmt.Sprintf(format, args...))
		},
		"json": func(v any) (string, error) {
			b, err := json.Marshal(v)
			if err != nil {
				return "", err
			}
			return capped(string(b))
		},
	}
}

// checkFormat refuses printf formats with * widths or widths and precisions
// over maxPrintfWidth.
func checkFormat(f string) error {
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		// Scan the directive up to its verb (a letter) or a literal %.
		n := 0
		for i++; i < len(f); i++ {
			c := f[i]
			switch {
			case c >= '0' && c <= '9':
				n = n*10 + int(c-'0')
				if n > maxPrintfWidth {
					return fmt.Errorf("printf: width or precision over %d", maxPrintfWidth)
				}
				continue
			case c == '*':
				return errors.New("printf: * widths are not allowed")
			case c == '.' || c == '[' || c == ']' || c == '+' || c == '-' || c == '#' || c == ' ':
				n = 0
				continue
			}
			break
		}
	}
	return nil
}

// checker walks a parsed template: it refuses template actions (and range
// unless allowed) and checks that fields taken from the top-level data exist.
type checker struct {
	names      map[string]bool
	allowRange bool
	// params, when set, collects the keys of .Params.key references.
	params *[]string
}

// useParam records a .Params.key reference (idents are the field chain
// from the data: "Params", "key", ...).
func (c *checker) useParam(idents []string) {
	if c.params != nil && len(idents) > 1 && idents[0] == "Params" {
		*c.params = append(*c.params, idents[1])
	}
}

func (c *checker) walk(n parse.Node, dotIsData bool) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, child := range n.Nodes {
			if err := c.walk(child, dotIsData); err != nil {
				return err
			}
		}
	case *parse.ActionNode:
		return c.pipe(n.Pipe, dotIsData)
	case *parse.IfNode:
		return c.branch(&n.BranchNode, dotIsData, dotIsData)
	case *parse.WithNode:
		return c.branch(&n.BranchNode, dotIsData, false)
	case *parse.RangeNode:
		if !c.allowRange {
			return notAllowed("", "range actions are not allowed in inline stages")
		}
		return c.branch(&n.BranchNode, dotIsData, false)
	case *parse.TemplateNode:
		return invalid("", "bad template: template actions are not allowed")
	}
	return nil
}

func (c *checker) branch(n *parse.BranchNode, dotIsData, dotInList bool) error {
	if err := c.pipe(n.Pipe, dotIsData); err != nil {
		return err
	}
	if err := c.walk(n.List, dotInList); err != nil {
		return err
	}
	return c.walk(n.ElseList, dotIsData)
}

func (c *checker) pipe(p *parse.PipeNode, dotIsData bool) error {
	if p == nil {
		return nil
	}
	for _, cmd := range p.Cmds {
		for _, arg := range cmd.Args {
			if err := c.arg(arg, dotIsData); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *checker) arg(n parse.Node, dotIsData bool) error {
	switch n := n.(type) {
	case *parse.FieldNode:
		if dotIsData {
			c.useParam(n.Ident)
			return c.name(n.Ident[0])
		}
	case *parse.VariableNode:
		// $ is the data, whatever dot is.
		if n.Ident[0] == "$" && len(n.Ident) > 1 {
			c.useParam(n.Ident[1:])
			return c.name(n.Ident[1])
		}
	case *parse.ChainNode:
		return c.arg(n.Node, dotIsData)
	case *parse.PipeNode:
		return c.pipe(n, dotIsData)
	}
	return nil
}

func (c *checker) name(name string) error {
	if c.names[name] {
		return nil
	}
	known := make([]string, 0, len(c.names))
	for n := range c.names {
		known = append(known, "."+n)
	}
	slices.Sort(known)
	return invalid("", "bad template: unknown field %s (known: %s)", task.Quote("."+name), strings.Join(known, ", "))
}
