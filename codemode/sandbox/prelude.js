// The prelude: the bindings of a program, set up before any of its code
// runs. It is compiled once per process, to bytecode named "<sandbox>" (see
// preludeBytecode), and every run evaluates that bytecode in its fresh VM:
// the value is the function below, which Go calls with the run's
// configuration, as JSON (see preludeConfig), and which returns run.
//
// Everything here reaches Go through one host function, the bridge, which
// takes strings and returns a JSON string (or a number for "log"). The
// bridge is a global only until the first statements below delete it: from
// then on it lives in this function's scope, out of the program's reach. Go
// checks every call on its side all the same (capability names, limits).
//
// The built-ins used are captured first, so that a program replacing
// JSON.parse, say, breaks only its own view of them. No program code has run
// when this function is called.

(function (configJSON) {
"use strict";

const CONFIG = JSON.parse(configJSON);
const bridge = globalThis[CONFIG.bridge];
delete globalThis[CONFIG.bridge];

const stringify = JSON.stringify;
const parse = JSON.parse;
const ErrorClass = Error;
const TypeErrorClass = TypeError;
const defineProperty = Object.defineProperty;
const freeze = Object.freeze;
const create = Object.create;
const keys = Object.keys;
const assign = Object.assign;
const isArray = Array.isArray;
const toString = String;
const ObjectClass = Object;
const apply = Reflect.apply;
const RangeErrorClass = RangeError;
const isConcatSpreadable = Symbol.isConcatSpreadable;

// The engine's Array methods walk every index up to length in one call
// without checking for interrupts, so a call on a long array-like, such as
// [].includes.call({length: 2 ** 53}, 1), held the run past its time limit.
// The wrappers below refuse lengths over CONFIG.maxLength, the most elements
// a dense array can have in the VM's memory: no array that exists is refused.
// Methods that call a function for every index are interruptible, but skip
// holes without calling it, so they are wrapped too.
//
// Reading the length once is not enough: an array-like's length may be a
// getter that answers 0 to the check and 2 ** 28 to the engine, and a Proxy
// (of an array, too) may do the same from its get trap, with its other
// operations forwarded natively. So only a genuine array, whose length is a
// data property the engine reads without running code, goes to the native
// method as it is. Anything else goes through a view: a Proxy whose length
// is the one checked and whose every operation is a function here, so each
// index the engine visits runs code, where the engine does check for
// interrupts, and the time limit ends the walk. Programs create proxies
// through the Proxy below, which records them: isArray alone cannot tell a
// Proxy of an array from an array.
const ProxyClass = Proxy;
const WeakSetClass = WeakSet;
const weakAdd = WeakSetClass.prototype.add;
const weakHas = WeakSetClass.prototype.has;
const proxies = new WeakSetClass();
const reflect = {
	get: Reflect.get, set: Reflect.set, has: Reflect.has, deleteProperty: Reflect.deleteProperty,
	defineProperty: Reflect.defineProperty, getOwnPropertyDescriptor: Reflect.getOwnPropertyDescriptor,
	ownKeys: Reflect.ownKeys,
};

function RecordedProxy(target, handler) {
	if (new.target === undefined) throw new TypeErrorClass("Proxy: must be called with new");
	const p = new ProxyClass(target, handler);
	apply(weakAdd, proxies, [p]);
	return p;
}
defineProperty(RecordedProxy, "name", { value: "Proxy" });
defineProperty(RecordedProxy, "revocable", {
	value: function revocable(target, handler) {
		const r = ProxyClass.revocable(target, handler);
		apply(weakAdd, proxies, [r.proxy]);
		return r;
	},
	writable: true, configurable: true,
});
defineProperty(globalThis, "Proxy", { value: RecordedProxy, writable: true, configurable: true });

function lengthOf(o) {
	if (o === null || o === undefined) return 0;
	const n = +ObjectClass(o).length;
	return n > 0 ? n : 0;
}

function checkLength(name, o) {
	const n = lengthOf(o);
	if (n > CONFIG.maxLength) {
		throw new RangeErrorClass("Array.prototype." + name + ": length " + n + " is over the sandbox's limit of " + CONFIG.maxLength);
	}
	return n;
}

function genuineArray(o) {
	return isArray(o) && !apply(weakHas, proxies, [o]);
}

// view returns what a native method may be given for o: o itself when it
// is a genuine array, else the view described above, fixed at length n.
function view(o, n) {
	if (genuineArray(o)) return o;
	return new ProxyClass(ObjectClass(o), {
		get(t, k) { return k === "length" ? n : reflect.get(t, k); },
		set(t, k, v) { return reflect.set(t, k, v); },
		has(t, k) { return reflect.has(t, k); },
		deleteProperty(t, k) { return reflect.deleteProperty(t, k); },
		defineProperty(t, k, d) { return reflect.defineProperty(t, k, d); },
		getOwnPropertyDescriptor(t, k) { return reflect.getOwnPropertyDescriptor(t, k); },
		ownKeys(t) { return reflect.ownKeys(t); },
	});
}

// guardedCall checks the receiver's length and calls the native method on
// it (or its view); a method that returns its receiver returns the object
// it was called on, not the view.
function guardedCall(name, self, args) {
	const n = checkLength(name, self);
	const v = view(self, n);
	const r = apply(original[name], v, args);
	return r === v && v !== self ? ObjectClass(self) : r;
}

const AP = Array.prototype;
const original = {
	concat: AP.concat, copyWithin: AP.copyWithin, every: AP.every, fill: AP.fill, filter: AP.filter,
	forEach: AP.forEach, includes: AP.includes, indexOf: AP.indexOf, join: AP.join, lastIndexOf: AP.lastIndexOf,
	map: AP.map, reduce: AP.reduce, reduceRight: AP.reduceRight, reverse: AP.reverse, shift: AP.shift,
	slice: AP.slice, some: AP.some, sort: AP.sort, splice: AP.splice, toLocaleString: AP.toLocaleString,
	toReversed: AP.toReversed, toSorted: AP.toSorted, toSpliced: AP.toSpliced, toString: AP.toString,
	unshift: AP.unshift, with: AP.with,
};

// flat and flatMap walk nested arrays natively too, whose lengths no
// wrapper sees: they are done here in JS, where the engine checks for
// interrupts, with every level's length checked.
function flatten(target, source, depth, name) {
	const n = checkLength(name, source);
	for (let i = 0; i < n; i++) {
		if (!(i in source)) continue;
		const v = source[i];
		if (depth > 0 && isArray(v)) flatten(target, v, depth - 1, name);
		else target.push(v);
	}
	return target;
}

// Each wrapper has the name and length of the method it wraps, and calls it
// with the arguments it got. They are written out, rather than made in a
// loop, because every run makes them again: a method of an object literal
// costs less than a function made, then given a name and a length.
// The wrappers replace the methods by assignment, which keeps the
// attributes the engine gave them (writable, configurable, not enumerable).
// The engine has every one of these methods (TestGuardedMethods checks).
const guarded = {
	concat(value) {
		const self = view(this, checkLength("concat", this));
		const args = [];
		for (let i = 0; i < arguments.length; i++) {
			const a = arguments[i];
			const spread = a !== null && typeof a === "object" && (isArray(a) || a[isConcatSpreadable]);
			args[i] = spread ? view(a, checkLength("concat", a)) : a;
		}
		return apply(original.concat, self, args);
	},
	copyWithin(target, start) { return guardedCall("copyWithin", this, arguments); },
	every(callback) { return guardedCall("every", this, arguments); },
	fill(value) { return guardedCall("fill", this, arguments); },
	filter(callback) { return guardedCall("filter", this, arguments); },
	forEach(callback) { return guardedCall("forEach", this, arguments); },
	includes(value) { return guardedCall("includes", this, arguments); },
	indexOf(value) { return guardedCall("indexOf", this, arguments); },
	join(separator) { return guardedCall("join", this, arguments); },
	lastIndexOf(value) { return guardedCall("lastIndexOf", this, arguments); },
	map(callback) { return guardedCall("map", this, arguments); },
	reduce(callback) { return guardedCall("reduce", this, arguments); },
	reduceRight(callback) { return guardedCall("reduceRight", this, arguments); },
	reverse() { return guardedCall("reverse", this, arguments); },
	shift() { return guardedCall("shift", this, arguments); },
	slice(start, end) { return guardedCall("slice", this, arguments); },
	some(callback) { return guardedCall("some", this, arguments); },
	sort(compare) { return guardedCall("sort", this, arguments); },
	splice(start, count) { return guardedCall("splice", this, arguments); },
	toLocaleString() { return guardedCall("toLocaleString", this, arguments); },
	toReversed() { return guardedCall("toReversed", this, arguments); },
	toSorted(compare) { return guardedCall("toSorted", this, arguments); },
	toSpliced(start, count) { return guardedCall("toSpliced", this, arguments); },
	toString() { return guardedCall("toString", this, arguments); },
	unshift(value) { return guardedCall("unshift", this, arguments); },
	with(index, value) { return guardedCall("with", this, arguments); },
	flat() {
		const depth = arguments[0];
		const d = depth === undefined ? 1 : +depth;
		return flatten([], ObjectClass(this), d > 0 ? d : 0, "flat");
	},
	flatMap(callback) {
		const self = view(this, checkLength("flatMap", this)); // before map walks it
		if (typeof callback !== "function") throw new TypeErrorClass("Array.prototype.flatMap: not a function");
		return flatten([], apply(original.map, self, [callback, arguments[1]]), 1, "flatMap");
	},
};
assign(AP, guarded);

// host sends one host operation and returns its parsed value, or throws the
// error the host returned: an Error with .code.
function host(op, a, b) {
	const reply = parse(bridge(op, a, b));
	if (reply.error !== undefined) {
		const err = new ErrorClass(reply.error.message);
		err.code = reply.error.code;
		throw err;
	}
	return reply.value;
}

// json encodes value for a host, refusing what JSON cannot carry instead of
// silently sending nothing.
function json(value, what) {
	const s = stringify(value);
	if (s === undefined) {
		throw new TypeErrorClass(what + " cannot be encoded as JSON");
	}
	return s;
}

// codemode has exactly the capabilities of the program, and no prototype,
// so that codemode.toString is as undefined as any other name. It is a
// Proxy that makes each capability's function the first time the program
// reads it (and keeps it, so a name always gives the same function): a run
// that calls one capability of many makes one function, not one per
// capability. Its properties are read-only: every change is refused, so it
// throws in the program's strict-mode code. The handler, its cache and the
// target are out of the program's reach; the traps use only built-ins
// captured above.
const capabilityNames = CONFIG.capabilities;
let capabilitySet = null; // name → true, made on the first lookup
function isCapability(k) {
	if (typeof k !== "string") return false;
	if (capabilitySet === null) {
		capabilitySet = create(null);
		for (let i = 0; i < capabilityNames.length; i++) capabilitySet[capabilityNames[i]] = true;
	}
	return capabilitySet[k] === true;
}
const bindings = create(null);
function binding(name) {
	let f = bindings[name];
	if (f === undefined) {
		f = {
			async [name](args) {
				return host("call", name, args === undefined ? "{}" : json(args, "the arguments of codemode." + name));
			},
		}[name];
		bindings[name] = f;
	}
	return f;
}
const refuse = () => false;
const codemode = new ProxyClass(create(null), {
	get(t, k) { return isCapability(k) ? binding(k) : undefined; },
	has(t, k) { return isCapability(k); },
	ownKeys(t) {
		const out = [];
		for (let i = 0; i < capabilityNames.length; i++) out[i] = capabilityNames[i];
		return out;
	},
	getOwnPropertyDescriptor(t, k) {
		// configurable, as a Proxy must call a property its target lacks
		return isCapability(k) ? { value: binding(k), writable: false, enumerable: true, configurable: true } : undefined;
	},
	deleteProperty(t, k) { return !isCapability(k); },
	set: refuse, defineProperty: refuse, setPrototypeOf: refuse, preventExtensions: refuse,
});

function headerObject(headers) {
	const out = {};
	if (isArray(headers)) {
		for (const pair of headers) {
			out[toString(pair[0])] = toString(pair[1]);
		}
		return out;
	}
	for (const name of keys(headers)) {
		out[name] = toString(headers[name]);
	}
	return out;
}

// fetch is a small subset of the web's fetch: the host sends the request and
// returns the whole response, which this wraps in a Response-like object.
async function fetch(url, init) {
	const request = { url: toString(url) };
	if (init !== undefined && init !== null) {
		if (init.method !== undefined) {
			request.method = toString(init.method).toUpperCase();
		}
		if (init.headers !== undefined && init.headers !== null) {
			request.headers = headerObject(init.headers);
		}
		if (init.body !== undefined && init.body !== null) {
			if (typeof init.body !== "string") {
				throw new TypeErrorClass("fetch: body must be a string (use JSON.stringify for JSON)");
			}
			request.body = init.body;
		}
	}
	const r = host("fetch", stringify(request));
	const body = r.body;
	return freeze({
		status: r.status,
		ok: r.status >= 200 && r.status <= 299,
		url: r.url,
		headers: r.headers,
		async text() {
			return body;
		},
		async json() {
			return parse(body);
		},
	});
}

function storageKey(key, what) {
	if (typeof key !== "string") {
		throw new TypeErrorClass(what + ": key must be a string");
	}
	return stringify(key);
}

const storage = freeze({
	async get(key) {
		return host("storage", "get", '{"key":' + storageKey(key, "storage.get") + "}");
	},
	async set(key, value) {
		const k = storageKey(key, "storage.set");
		return host("storage", "set", '{"key":' + k + ',"value":' + json(value, "the value of storage.set") + "}");
	},
	async delete(key) {
		return host("storage", "delete", '{"key":' + storageKey(key, "storage.delete") + "}");
	},
	async list(options) {
		const args = {};
		if (options !== undefined && options !== null) {
			if (options.prefix !== undefined) args.prefix = toString(options.prefix);
			if (options.cursor !== undefined) args.cursor = toString(options.cursor);
			if (options.limit !== undefined) args.limit = +options.limit;
		}
		return host("storage", "list", stringify(args));
	},
});

// show formats one console argument: strings as they are, other values as
// JSON where JSON can show them.
function show(v) {
	switch (typeof v) {
		case "string":
			return v;
		case "bigint":
			return toString(v) + "n";
		case "function":
			return v.name ? "[Function: " + v.name + "]" : "[Function]";
		case "object":
			if (v === null) return "null";
			if (v instanceof ErrorClass) {
				return typeof v.stack === "string" && v.stack !== "" ? toString(v) + "\n" + v.stack : toString(v);
			}
			try {
				const s = stringify(v);
				if (s !== undefined) return s;
			} catch (_) {
				// cyclic, or a throwing toJSON: fall back to String
			}
			try {
				return toString(v);
			} catch (_) {
				return "[object]";
			}
		default:
			return toString(v); // undefined, number, boolean, symbol
	}
}

// The budget of console output left, in UTF-16 units here, which are never
// more than the UTF-8 bytes Go counts. Go returns the budget after each
// entry; at zero, entries are still reported, empty, so that Go knows some
// output was dropped.
let logBudget = CONFIG.logLimit;

function logger(level) {
	return function (...args) {
		let message = "";
		if (logBudget > 0) {
			try {
				for (let i = 0; i < args.length; i++) {
					message += (i > 0 ? " " : "") + show(args[i]);
					if (message.length > logBudget) break;
				}
			} catch (_) {
				message = "[unprintable]";
			}
			if (message.length > logBudget) message = message.slice(0, logBudget + 1);
		}
		logBudget = bridge("log", level, message);
	};
}

const console = {
	log: logger("log"),
	info: logger("info"),
	warn: logger("warn"),
	error: logger("error"),
	debug: logger("debug"),
};

defineProperty(globalThis, "codemode", { value: codemode, writable: true, configurable: true });
defineProperty(globalThis, "fetch", { value: fetch, writable: true, configurable: true });
defineProperty(globalThis, "storage", { value: storage, writable: true, configurable: true });
defineProperty(globalThis, "console", { value: console, writable: true, configurable: true });

// report sends the fields of a thrown value to Go with op ("throw" or
// "resultError"). It reads properties only and allocates as little as
// possible: the error may be the engine's "out of memory".
// Each field is cut to CONFIG.maxMessage characters: Go keeps no more, and
// an error is no way around Limits.Result.
function report(op, e) {
	const cut = (s) => (s.length > CONFIG.maxMessage ? s.slice(0, CONFIG.maxMessage + 1) : s);
	try {
		if (e instanceof ErrorClass) {
			const name = e.name;
			const message = e.message;
			const stack = e.stack;
			bridge(
				op,
				typeof name === "string" ? cut(name) : "Error",
				cut(typeof message === "string" ? message : show(message)),
				typeof stack === "string" ? cut(stack) : "",
			);
		} else {
			// The engine throws null when it runs out of memory while making
			// its "out of memory" error: Go needs to know it was null.
			bridge(op, "", cut(show(e)), "", e === null);
		}
	} catch (_) {
		bridge(op, "", "", "");
	}
}

function reportResult(value) {
	let s;
	try {
		s = stringify(value);
	} catch (e) {
		report("resultError", e);
		return;
	}
	if (s === undefined) s = "null"; // undefined, a function, a symbol
	if (s.length > CONFIG.resultLimit) {
		bridge("resultTooBig", s.length);
		return;
	}
	bridge("result", s);
}

let started = false;

// run calls the program and reports its awaited value or what it threw. Its
// argument is the function the program's code was made into, or, when
// CONFIG.module is set, the namespace of that module, whose export
// CONFIG.export it calls with CONFIG.args. It runs once: a second call does
// nothing.
async function run(main) {
	if (started) return;
	started = true;
	let value;
	try {
		const f = CONFIG.module === undefined ? main : main[CONFIG.export];
		if (typeof f !== "function") {
			throw new TypeErrorClass(CONFIG.module === undefined
				? "the program's code did not make a function"
				: "module " + CONFIG.module + " has no exported function " + CONFIG.export);
		}
		value = await f(CONFIG.args === undefined ? undefined : parse(CONFIG.args));
	} catch (e) {
		report("throw", e);
		return;
	}
	reportResult(value);
}

// For a program that is a module, the bridge's global hands run on to the
// module "<sandbox>", the first the driver imports, which deletes it again
// before any module of the program is evaluated.
if (CONFIG.handOff) {
	defineProperty(globalThis, CONFIG.bridge, { value: run, configurable: true });
}
return run;
})
