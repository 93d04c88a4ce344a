package kvcache

// #include <stdlib.h>
// #include <kvcache/kvcache.h>
import "C"

import (
	"fmt"
	"log"
	"runtime"
	"runtime/cgo"
	"sync"
	"sync/atomic"
)

// Context holds the loaded plugins, the configuration and the thread arena. It is safe for
// concurrent use by any number of goroutines. Close it after every Cache made from it.
type Context struct {
	mu     sync.RWMutex // Close takes it exclusively; every other call shares it
	c      *C.kvc_context
	caches atomic.Int32 // caches made from this context and not yet closed
	logger cgo.Handle   // the SetLogger function the library calls; 0 when none
}

// NewContext creates a context from YAML text (docs/config.md); "" means the defaults. It
// loads the plugins of the default folder next to libkvcache, of KVC_PLUGIN_PATH and of the
// YAML's plugins.paths.
func NewContext(yaml string) (*Context, error) {
	var m cmem
	defer m.free()
	var c *C.kvc_context
	if err := statusError("kvc_context_create", C.kvc_context_create(m.str(yaml), &c)); err != nil {
		return nil, err
	}
	return newContext(c), nil
}

// NewContextFromFile is NewContext with the YAML read from the file at path.
func NewContextFromFile(path string) (*Context, error) {
	var m cmem
	defer m.free()
	var c *C.kvc_context
	err := statusError("kvc_context_create_from_file", C.kvc_context_create_from_file(m.str(path), &c))
	if err != nil {
		return nil, err
	}
	return newContext(c), nil
}

func newContext(c *C.kvc_context) *Context {
	ctx := &Context{c: c}
	runtime.SetFinalizer(ctx, func(ctx *Context) {
		log.Print("kvcache: a Context was not closed; closing it in its finalizer")
		ctx.Close()
	})
	return ctx
}

// Close destroys the context and unloads its plugins. It fails with an *Error of code
// ErrInvalidArgument, changing nothing, while a Cache made from it is open. Closing a closed
// context does nothing.
func (ctx *Context) Close() error {
	ctx.mu.Lock()
	defer ctx.mu.Unlock()
	if ctx.c == nil {
		return nil
	}
	if n := ctx.caches.Load(); n > 0 {
		return invalid("kvc_context_destroy", fmt.Sprintf("%d cache(s) made from the context are still open; close them first", n))
	}
	C.kvc_context_destroy(ctx.c)
	ctx.c = nil
	if ctx.logger != 0 {
		ctx.logger.Delete()
		ctx.logger = 0
	}
	runtime.SetFinalizer(ctx, nil)
	return nil
}

// LoadPlugin loads the plugins exported by the shared library at path.
func (ctx *Context) LoadPlugin(path string) error {
	ctx.mu.RLock()
	defer ctx.mu.RUnlock()
	if ctx.c == nil {
		return ErrClosed
	}
	var m cmem
	defer m.free()
	return statusError("kvc_context_load_plugin", C.kvc_context_load_plugin(ctx.c, m.str(path)))
}

// PluginKind tells policies, backends and stores apart.
type PluginKind int32

// The kinds of plugin.
const (
	PluginPolicy  PluginKind = C.KVC_PLUGIN_POLICY
	PluginBackend PluginKind = C.KVC_PLUGIN_BACKEND
	PluginStore   PluginKind = C.KVC_PLUGIN_STORE // offload and sharing tiers: host, disk, redis
)

// PluginInfo describes a loaded plugin.
type PluginInfo struct {
	Kind    PluginKind
	Name    string // the name YAML uses, such as "cpu" or "snapkv"
	Version uint32
	Path    string // the shared library it came from
}

// Plugins lists the loaded plugins.
func (ctx *Context) Plugins() ([]PluginInfo, error) {
	ctx.mu.RLock()
	defer ctx.mu.RUnlock()
	if ctx.c == nil {
		return nil, ErrClosed
	}
	n := int(C.kvc_context_plugin_count(ctx.c))
	plugins := make([]PluginInfo, 0, n)
	for i := 0; i < n; i++ {
		info := C.kvc_plugin_info{struct_size: C.sizeof_kvc_plugin_info}
		err := statusError("kvc_context_plugin_info", C.kvc_context_plugin_info(ctx.c, C.size_t(i), &info))
		if err != nil {
			return nil, err
		}
		plugins = append(plugins, PluginInfo{
			Kind:    PluginKind(info.kind),
			Name:    C.GoString(info.name),
			Version: uint32(info.version),
			Path:    C.GoString(info.path),
		})
	}
	return plugins, nil
}
