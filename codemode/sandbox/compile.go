package sandbox

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"modernc.org/libc"
	lib "modernc.org/libquickjs"
	"modernc.org/quickjs"
)

//go:embed prelude.js
var preludeJS string

// preludeBytecode is prelude.js compiled once per process, for every run to
// evaluate in its own VM: reading bytecode costs a fraction of parsing the
// source again. QuickJS bytecode loads in any runtime of the same engine
// build, which is the one this process links.
var preludeBytecode = sync.OnceValues(func() ([]byte, error) {
	return compileScript(preludeJS, preludeModule)
})

// compileScript compiles js, strict-mode global code, to bytecode whose
// functions have the file name name in stack traces and no source text
// (their toString shows native code, as the built-ins they stand for do).
//
// It uses the engine directly because quickjs.VM.Compile names everything it
// compiles "<eval>", the name of the code Go evaluates: the program's, when
// it is a script (see program), whose frames must be told from the
// prelude's.
func compileScript(js, name string) (bytecode []byte, err error) {
	tls := libc.NewTLS()
	defer tls.Close()
	rt := lib.XJS_NewRuntime(tls)
	if rt == 0 {
		return nil, errors.New("sandbox: compile: cannot create a runtime")
	}
	defer lib.XJS_FreeRuntime(tls, rt)
	lib.XJS_SetStripInfo(tls, rt, lib.MJS_STRIP_SOURCE)
	ctx := lib.XJS_NewContext(tls, rt)
	if ctx == 0 {
		return nil, errors.New("sandbox: compile: cannot create a context")
	}
	defer lib.XJS_FreeContext(tls, ctx)

	src, err := libc.CString(js)
	if err != nil {
		return nil, err
	}
	defer libc.Xfree(tls, src)
	file, err := libc.CString(name)
	if err != nil {
		return nil, err
	}
	defer libc.Xfree(tls, file)

	fn := lib.XJS_Eval(tls, ctx, src, libc.Tsize_t(len(js)), file,
		lib.MJS_EVAL_TYPE_GLOBAL|lib.MJS_EVAL_FLAG_STRICT|lib.MJS_EVAL_FLAG_COMPILE_ONLY)
	if lib.XJS_HasException(tls, ctx) != 0 {
		lib.XFreeValue(tls, ctx, lib.XJS_GetException(tls, ctx))
		return nil, fmt.Errorf("sandbox: compile %s: %w", name, compileError(js))
	}
	defer lib.XFreeValue(tls, ctx, fn)

	const sizeofSize = int(unsafe.Sizeof(libc.Tsize_t(0)))
	psize := tls.Alloc(sizeofSize)
	defer tls.Free(sizeofSize)
	p := lib.XJS_WriteObject(tls, ctx, psize, fn, lib.MJS_WRITE_OBJ_BYTECODE)
	if p == 0 {
		return nil, fmt.Errorf("sandbox: compile %s: cannot write the bytecode", name)
	}
	defer lib.Xjs_free(tls, ctx, p)
	var size uint64
	if b := libc.GoBytes(psize, sizeofSize); sizeofSize == 8 {
		size = binary.NativeEndian.Uint64(b)
	} else {
		size = uint64(binary.NativeEndian.Uint32(b))
	}
	return append([]byte(nil), libc.GoBytes(p, int(size))...), nil
}

// compileError returns the error quickjs reports for js: it has the
// engine's message and position, which are not worth getting out of the
// engine by hand for a prelude that does not compile.
func compileError(js string) error {
	vm, err := quickjs.NewVM()
	if err != nil {
		return err
	}
	defer vm.Close()
	if _, err := vm.Compile(js, quickjs.EvalGlobal|lib.MJS_EVAL_FLAG_STRICT); err != nil {
		return err
	}
	return errors.New("the engine threw an exception")
}
