package stage

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/deploycoord/deploycoord/task"
)

// Defaults of Options.
const (
	// MaxOutputBytesDefault caps captured output when Options sets no cap.
	MaxOutputBytesDefault = 1 << 20
)

// InlineKindsDefault are the kinds allowed inline when Options.InlineKinds is nil.
var InlineKindsDefault = []string{"noop", "sleep", "http"}

// Options configure a Registry. The zero value is usable: the default inline
// kinds, no inline http host, no exec.
type Options struct {
	// InlineKinds are the kinds allowed in inline stages. nil means
	// InlineKindsDefault; an empty, non-nil slice allows none. exec is never
	// allowed inline, listed or not.
	InlineKinds []string
	// InlineHTTPHosts are the hosts inline http stages may call: "host"
	// (any port) or "host:port"; IPv6 literals in brackets ("[::1]:8080").
	// Names match case-insensitively. Empty: inline http stages call nothing.
	InlineHTTPHosts []string
	// InlineHTTPHostsSetting names, in the error refusing an inline host,
	// the setting an operator changes to allow it (the server passes
	// "DEPLOYCOORD_INLINE_HTTP_HOSTS"); "" means "the server's inline HTTP hosts setting".
	InlineHTTPHostsSetting string
	// AllowExec enables the exec kind in operator pipelines. Without it an
	// exec stage is refused with ErrNotAllowed.
	AllowExec bool
	// HTTPClient sends the requests of http stages; nil means a client with
	// dial and TLS handshake timeouts of 10s and no proxy. Inline stages use a
	// copy of its *http.Transport with the proxy removed and a dialer that
	// refuses link-local and metadata addresses (a transport of another type
	// is replaced by the default one), and follow no redirect to another host.
	HTTPClient *http.Client
	// MaxOutputBytes caps a response body or each of a command's stdout and
	// stderr, and rendered templates; 0 means MaxOutputBytesDefault.
	MaxOutputBytes int64
}

// Validate reports the first problem with o (NewRegistry accepts any
// Options, but an InlineHTTPHosts entry that Validate refuses matches nothing).
func (o Options) Validate() error {
	if o.MaxOutputBytes < 0 {
		return fmt.Errorf("%w: stage options: maxOutputBytes %d is negative", ErrInvalid, o.MaxOutputBytes)
	}
	for _, k := range o.InlineKinds {
		if !task.ValidStageName(k) {
			return fmt.Errorf("%w: stage options: inline kind %s is not a valid kind name", ErrInvalid, task.Quote(k))
		}
	}
	for _, h := range o.InlineHTTPHosts {
		if _, err := parseHostEntry(h); err != nil {
			return fmt.Errorf("%w: stage options: inline http host %s: %v", ErrInvalid, task.Quote(h), err)
		}
	}
	return nil
}

// Registry holds the stage kinds by name and compiles specs. It is safe for
// concurrent use.
type Registry struct {
	mu          sync.RWMutex
	kinds       map[string]Kind
	inline      map[string]bool
	maxOutput   int64
	allowedKind []string // inline kinds for messages, sorted, exec left out
}

// NewRegistry returns a registry holding the built-in kinds noop, sleep,
// http and exec, configured by opts.
func NewRegistry(opts Options) *Registry {
	maxOutput := opts.MaxOutputBytes
	if maxOutput <= 0 {
		maxOutput = MaxOutputBytesDefault
	}
	inlineKinds := opts.InlineKinds
	if inlineKinds == nil {
		inlineKinds = InlineKindsDefault
	}
	r := &Registry{kinds: map[string]Kind{}, inline: map[string]bool{}, maxOutput: maxOutput}
	for _, k := range inlineKinds {
		if k == "exec" || r.inline[k] {
			continue
		}
		r.inline[k] = true
		r.allowedKind = append(r.allowedKind, k)
	}
	slices.Sort(r.allowedKind)

	client := opts.HTTPClient
	if client == nil {
		client = &http.Client{Transport: newTransport(nil)}
	}
	var hosts []hostEntry
	for _, h := range opts.InlineHTTPHosts {
		if e, err := parseHostEntry(h); err == nil {
			hosts = append(hosts, e)
		}
	}
	r.kinds["noop"] = noopKind{}
	r.kinds["sleep"] = sleepKind{}
	setting := opts.InlineHTTPHostsSetting
	if setting == "" {
		setting = "the server's inline HTTP hosts setting"
	}
	r.kinds["http"] = &httpKind{client: client, inlineClient: inlineClient(client, nil), hosts: hosts, hostsSetting: setting}
	r.kinds["exec"] = execKind{allowed: opts.AllowExec}
	return r
}

// newTransport returns the transport of the default client; control, when
// set, vets every address before the dialer connects to it.
func newTransport(control func(network, address string, c syscall.RawConn) error) *http.Transport {
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: keepAlive}
	if control != nil {
		d.Control = control
	}
	return &http.Transport{
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   10,
		IdleConnTimeout:       idleConnTimeout,
		TLSHandshakeTimeout:   dialTimeout,
		ExpectContinueTimeout: expectContinueTimeout,
	}
}

// Register adds a kind under name, which must be a valid kind name
// (task.ValidStageName) not yet registered. Returns ErrDuplicate for a taken
// name and an error wrapping ErrInvalid for a bad name or a nil kind. A
// registered kind is allowed inline only when Options.InlineKinds lists it.
func (r *Registry) Register(name string, k Kind) error {
	if !task.ValidStageName(name) {
		return fmt.Errorf("%w: register kind %s: not a valid kind name", ErrInvalid, task.Quote(name))
	}
	if k == nil {
		return fmt.Errorf("%w: register kind %s: nil Kind", ErrInvalid, task.Quote(name))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.kinds[name]; ok {
		return fmt.Errorf("register kind %s: %w", task.Quote(name), ErrDuplicate)
	}
	r.kinds[name] = k
	return nil
}

// Kinds returns the names of the registered kinds, sorted.
func (r *Registry) Kinds() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.kinds))
	for n := range r.kinds {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Compile turns spec, from src, into a Runnable. The caller has checked
// spec.Validate(); Compile checks that the kind exists and is allowed from
// src, and has the kind check its config. Errors are *ConfigError values
// naming the stage and wrapping ErrInvalid (unknown kind, bad config) or
// ErrNotAllowed (kind, host or command not allowed from src). The Runnable
// turns a panic of the kind's Run into a non-retryable Failure.
func (r *Registry) Compile(spec task.StageSpec, src Source) (Runnable, error) {
	run, err := r.compile(spec, src)
	if err != nil {
		var ce *ConfigError
		if !errors.As(err, &ce) {
			ce = &ConfigError{Reason: clean(err.Error(), 500), Err: ErrInvalid}
			if errors.Is(err, ErrNotAllowed) {
				ce.Err = ErrNotAllowed
			}
		}
		out := *ce
		out.Stage = spec.Name
		return nil, &out
	}
	return guarded{stage: spec.Name, r: run}, nil
}

func (r *Registry) compile(spec task.StageSpec, src Source) (Runnable, error) {
	return r.compileEnv(spec, src, nil)
}

// RequiredParams returns, for each stage of specs, the Params keys its
// templates name as fields ({{.Params.version}}), sorted, without repeats:
// a run whose params lack one fails, templates failing on a missing key.
// Keys reached with index ({{index .Params "k"}}) are not listed. Errors
// are those of CompileAll.
func (r *Registry) RequiredParams(specs []task.StageSpec, src Source) ([][]string, error) {
	out := make([][]string, len(specs))
	for i, spec := range specs {
		var keys []string
		if _, err := r.compileEnv(spec, src, &keys); err != nil {
			return nil, fmt.Errorf("stages[%d]: %w", i, err)
		}
		slices.Sort(keys)
		out[i] = slices.Compact(keys)
	}
	return out, nil
}

func (r *Registry) compileEnv(spec task.StageSpec, src Source, params *[]string) (Runnable, error) {
	if src != SourceInline && src != SourceOperator {
		return nil, invalid("", "unknown source %d", int(src))
	}
	r.mu.RLock()
	k, ok := r.kinds[spec.Kind]
	r.mu.RUnlock()
	if !ok {
		return nil, invalid("kind", "unknown kind %s (registered: %s)", task.Quote(spec.Kind), strings.Join(r.Kinds(), ", "))
	}
	if src == SourceInline && !r.inline[spec.Kind] {
		allowed := "none"
		if len(r.allowedKind) > 0 {
			allowed = strings.Join(r.allowedKind, ", ")
		}
		return nil, notAllowed("kind", "kind %s is not allowed in inline stages (allowed: %s)", task.Quote(spec.Kind), allowed)
	}
	run, err := k.Compile(spec, Env{Source: src, MaxOutputBytes: r.maxOutput, params: params})
	if err != nil {
		return nil, err
	}
	if run == nil {
		return nil, invalid("", "kind %s compiled to nothing", task.Quote(spec.Kind))
	}
	return run, nil
}

// CompileAll compiles a pipeline; the first error (see Compile) stops it.
func (r *Registry) CompileAll(specs []task.StageSpec, src Source) ([]Runnable, error) {
	out := make([]Runnable, 0, len(specs))
	for i, spec := range specs {
		run, err := r.Compile(spec, src)
		if err != nil {
			return nil, fmt.Errorf("stages[%d]: %w", i, err)
		}
		out = append(out, run)
	}
	return out, nil
}

// guarded turns a panic of a stage's Run into a Failure.
type guarded struct {
	stage string
	r     Runnable
}

func (g guarded) Run(ctx context.Context, in Input) (res task.Result) {
	defer func() {
		if v := recover(); v != nil {
			res = task.Failure(fmt.Sprintf("stage %s panicked: %s", g.stage, clean(fmt.Sprint(v), 300)), false)
		}
	}()
	return g.r.Run(ctx, in)
}
