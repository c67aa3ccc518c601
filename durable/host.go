package durable

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"sync"
	"time"
	"unicode"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// Constructor makes the in-memory half of one instance. It runs once per
// address per daemon lifetime (on first call or alarm), under the
// instance's lock, and must not block on the object's own calls.
type Constructor func(st *State) (any, error)

// Config wires a Host.
type Config struct {
	// Store persists storage, alarms and the journal.
	Store interface {
		store.Objects
		store.Ops
	}
	// Compute runs containers for State.Container; nil makes every
	// Container call fail with failed_precondition.
	Compute Compute
	// AlarmTick is how often due alarms are polled (default 1s). Polling
	// against the wall clock, rather than one long timer, is what keeps a
	// clock jump from losing an alarm: an alarm fires on the first tick
	// whose clock reads at or after its time.
	AlarmTick time.Duration
	// MaxAlarmRetries bounds failed deliveries of one alarm (default 6);
	// retries back off exponentially from 1s.
	MaxAlarmRetries int
	// EvictAfter drops an instance's in-memory object after this long
	// without calls (default 15m); the next call constructs it again.
	// Objects keep what must survive in Storage.
	EvictAfter time.Duration
	// Owns, when set, says whether this host is where addr lives: in a
	// cluster every host shares the store, and an alarm is delivered only
	// by the host that owns its object (for a sandbox's object, the node
	// that owns the sandbox), never by the others, which skip it without
	// counting an attempt. An error skips the alarm until the next tick.
	// Nil: every object is this host's (a single host).
	Owns func(ctx context.Context, addr Address) (bool, error)
	// Now is the clock (tests move it); default time.Now.
	Now  func() time.Time
	Logf func(format string, args ...any)
}

// Host runs the registered classes and their instances.
type Host struct {
	cfg     Config
	mu      sync.Mutex
	classes map[string]*class
	live    map[Address]*instance
}

// Address names one instance.
type Address struct {
	Class string `json:"class"`
	ID    string `json:"id"`
}

func (a Address) String() string { return a.Class + "/" + a.ID }

type class struct {
	name    string
	ctor    Constructor
	typ     reflect.Type
	methods map[string]method
	alarm   bool
}

type method struct {
	fn      reflect.Method
	argType reflect.Type // nil: no args
	result  bool         // returns (R, error) rather than error
}

type instance struct {
	addr     Address
	mu       sync.Mutex // serializes calls
	obj      any        // nil until constructed (guarded by mu)
	st       *State
	lastUsed time.Time // guarded by mu
	evicted  bool      // guarded by mu: dropped from Host.live; look up again
}

var (
	ctxType   = reflect.TypeOf((*context.Context)(nil)).Elem()
	errType   = reflect.TypeOf((*error)(nil)).Elem()
	alarmType = reflect.TypeOf(AlarmInfo{})
	nameRE    = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)
	idRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,159}$`)
)

// NewHost returns a Host. Register classes, then call Run for alarms.
func NewHost(cfg Config) *Host {
	if cfg.AlarmTick <= 0 {
		cfg.AlarmTick = time.Second
	}
	if cfg.MaxAlarmRetries <= 0 {
		cfg.MaxAlarmRetries = 6
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.EvictAfter <= 0 {
		cfg.EvictAfter = 15 * time.Minute
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &Host{cfg: cfg, classes: map[string]*class{}, live: map[Address]*instance{}}
}

// Register adds a class. prototype is a value of the type the constructor
// returns (e.g. (*Counter)(nil)); its exported methods of the RPC form
// become callable. Registering a name twice is an error.
func (h *Host) Register(name string, prototype any, ctor Constructor) error {
	if !nameRE.MatchString(name) {
		return errdefs.InvalidArgument("class name %q must match %s", name, nameRE)
	}
	typ := reflect.TypeOf(prototype)
	if typ == nil || ctor == nil {
		return errdefs.InvalidArgument("class %q needs a prototype and a constructor", name)
	}
	c := &class{name: name, ctor: ctor, typ: typ, methods: map[string]method{}}
	for i := 0; i < typ.NumMethod(); i++ {
		m := typ.Method(i)
		ft := m.Type // receiver first
		if m.Name == "Alarm" {
			if ft.NumIn() == 3 && ft.In(1) == ctxType && ft.In(2) == alarmType && ft.NumOut() == 1 && ft.Out(0) == errType {
				c.alarm = true
				continue
			}
			return errdefs.InvalidArgument("class %q: Alarm must be func(context.Context, durable.AlarmInfo) error", name)
		}
		if ft.NumIn() < 2 || ft.NumIn() > 3 || ft.In(1) != ctxType || ft.NumOut() < 1 || ft.NumOut() > 2 || ft.Out(ft.NumOut()-1) != errType {
			continue // not an RPC method
		}
		md := method{fn: m, result: ft.NumOut() == 2}
		if ft.NumIn() == 3 {
			md.argType = ft.In(2)
		}
		c.methods[m.Name] = md
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, dup := h.classes[name]; dup {
		return errdefs.AlreadyExists("class %q is already registered", name)
	}
	h.classes[name] = c
	return nil
}

// Classes lists the registered classes and their RPC methods.
func (h *Host) Classes() map[string][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]string{}
	for n, c := range h.classes {
		for m := range c.methods {
			out[n] = append(out[n], m)
		}
	}
	return out
}

func (h *Host) lookup(addr Address) (*class, *instance, error) {
	if !idRE.MatchString(addr.ID) {
		return nil, nil, errdefs.InvalidArgument("object id %q must match %s", addr.ID, idRE)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.classes[addr.Class]
	if c == nil {
		return nil, nil, errdefs.NotFound("no object class %q", addr.Class)
	}
	in := h.live[addr]
	if in == nil {
		in = &instance{addr: addr}
		in.st = newState(h, addr)
		h.live[addr] = in
	}
	return c, in, nil
}

// ensure constructs the instance's object. Callers hold in.mu.
func (h *Host) ensure(c *class, in *instance) error {
	if in.obj != nil {
		return nil
	}
	obj, err := c.ctor(in.st)
	if err != nil {
		return fmt.Errorf("construct %s: %w", in.addr, err)
	}
	if reflect.TypeOf(obj) != c.typ {
		return errdefs.Internal("constructor of %q returned %T, registered as %s", c.name, obj, c.typ)
	}
	in.obj = obj
	return nil
}

// Call invokes method on the instance at addr with JSON args (nil or empty
// for none) and returns the JSON result ("null" for methods that return
// only an error). An unknown class or method is not found; args that do
// not decode are invalid argument.
func (h *Host) Call(ctx context.Context, addr Address, name string, args json.RawMessage) (json.RawMessage, error) {
	c, _, err := h.lookup(addr)
	if err != nil {
		return nil, err
	}
	m, ok := c.methods[name]
	if !ok || name == "" || !unicode.IsUpper(rune(name[0])) {
		return nil, errdefs.NotFound("class %q has no method %q", addr.Class, name)
	}
	callArgs := []reflect.Value{reflect.Value{}, reflect.ValueOf(ctx)}
	if m.argType != nil {
		p := reflect.New(m.argType)
		if len(args) > 0 && string(args) != "null" {
			if err := json.Unmarshal(args, p.Interface()); err != nil {
				return nil, errdefs.InvalidArgument("%s.%s: bad arguments: %w", addr.Class, name, err)
			}
		}
		callArgs = append(callArgs, p.Elem())
	} else if len(args) > 0 && string(args) != "null" && string(args) != "{}" {
		return nil, errdefs.InvalidArgument("%s.%s takes no arguments", addr.Class, name)
	}
	c, in, err := h.acquire(addr)
	if err != nil {
		return nil, err
	}
	defer h.release(in)
	if err := h.ensure(c, in); err != nil {
		return nil, err
	}
	callArgs[0] = reflect.ValueOf(in.obj)
	out := m.fn.Func.Call(callArgs)
	if e := out[len(out)-1]; !e.IsNil() {
		return nil, e.Interface().(error)
	}
	if !m.result {
		return json.RawMessage("null"), nil
	}
	b, err := json.Marshal(out[0].Interface())
	if err != nil {
		return nil, errdefs.Internal("%s.%s: encode result: %w", addr.Class, name, err)
	}
	return b, nil
}

// Storage returns the storage of the instance at addr, for code outside
// the object (tests, operators' tools). Writes through it are not
// serialized with the object's calls.
func (h *Host) Storage(addr Address) *Storage {
	return &Storage{st: h.cfg.Store, object: addr.String()}
}

// DoAs runs fn inside the instance's serialization, with its object, as
// an alarm or call would. It is how embedding code reaches an object
// without going through JSON.
func (h *Host) DoAs(ctx context.Context, addr Address, fn func(obj any, st *State) error) error {
	c, in, err := h.acquire(addr)
	if err != nil {
		return err
	}
	defer h.release(in)
	if err := h.ensure(c, in); err != nil {
		return err
	}
	return fn(in.obj, in.st)
}

// StateOf returns the State of the instance at addr without constructing
// its object or taking its lock: for platform code that schedules alarms
// or reads storage on an object's behalf, possibly from inside one of
// that object's own calls.
func (h *Host) StateOf(addr Address) (*State, error) {
	_, in, err := h.lookup(addr)
	if err != nil {
		return nil, err
	}
	return in.st, nil
}

// acquire looks up the instance at addr and takes its lock, retrying if
// the instance was evicted while this caller waited for the lock: so two
// live instances of one address never exist.
func (h *Host) acquire(addr Address) (*class, *instance, error) {
	for {
		c, in, err := h.lookup(addr)
		if err != nil {
			return nil, nil, err
		}
		in.mu.Lock()
		if !in.evicted {
			return c, in, nil
		}
		in.mu.Unlock()
	}
}

func (h *Host) release(in *instance) {
	in.lastUsed = h.cfg.Now()
	in.mu.Unlock()
}

// evictIdle drops instances idle for EvictAfter whose lock is free.
func (h *Host) evictIdle() {
	now := h.cfg.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for addr, in := range h.live {
		if !in.mu.TryLock() {
			continue
		}
		if now.Sub(in.lastUsed) >= h.cfg.EvictAfter {
			in.evicted = true
			delete(h.live, addr)
		}
		in.mu.Unlock()
	}
}

// Evict drops the instance at addr from memory, waiting for a call in
// progress to end; the next call constructs it again from its Storage. In
// a cluster the daemon evicts an object whose lease came back to this
// host after another held it: what this instance kept in memory may be
// older than what the other wrote to Storage.
func (h *Host) Evict(addr Address) {
	h.mu.Lock()
	in, ok := h.live[addr]
	if ok {
		delete(h.live, addr)
	}
	h.mu.Unlock()
	if !ok {
		return
	}
	in.mu.Lock()
	in.evicted = true
	in.mu.Unlock()
}

// Resident reports whether the instance at addr is in memory (a call,
// an alarm or StateOf looked it up, and it was not evicted since). In a
// cluster the daemon renews the object's lease while it is.
func (h *Host) Resident(addr Address) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.live[addr]
	return ok
}

// Live is the number of instances in memory.
func (h *Host) Live() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.live)
}
