// The module "<sandbox>": the bindings of a program, evaluated before any of
// its code. Go prepends `const CONFIG = {...};` (see preludeConfig) and the
// driver imports its default export, run.
//
// Everything here reaches Go through one host function, the bridge, which
// takes strings and returns a JSON string (or a number for "log"). The
// bridge is a global only until the first statement below deletes it: from
// then on it lives in this module's scope, out of the program's reach. Go
// checks every call on its side all the same (capability names, limits).
//
// The built-ins used are captured first, so that a program replacing
// JSON.parse, say, breaks only its own view of them.

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
const isArray = Array.isArray;
const toString = String;

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
// so that codemode.toString is as undefined as any other name.
const codemode = create(null);
for (const name of CONFIG.capabilities) {
	const call = {
		async [name](args) {
			return host("call", name, args === undefined ? "{}" : json(args, "the arguments of codemode." + name));
		},
	}[name];
	defineProperty(codemode, name, { value: call, enumerable: true });
}
freeze(codemode);

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

for (const [name, value] of [
	["codemode", codemode],
	["fetch", fetch],
	["storage", storage],
	["console", console],
]) {
	defineProperty(globalThis, name, { value, writable: true, configurable: true });
}

// report sends the fields of a thrown value to Go with op ("throw" or
// "resultError"). It reads properties only and allocates as little as
// possible: the error may be the engine's "out of memory".
function report(op, e) {
	try {
		if (e instanceof ErrorClass) {
			const name = e.name;
			const message = e.message;
			const stack = e.stack;
			bridge(
				op,
				typeof name === "string" ? name : "Error",
				typeof message === "string" ? message : show(message),
				typeof stack === "string" ? stack : "",
			);
		} else {
			// The engine throws null when it runs out of memory while making
			// its "out of memory" error: Go needs to know it was null.
			bridge(op, "", show(e), "", e === null);
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

// run calls the export of the program (its body, for code) and reports its
// awaited value or what it threw. It runs once: a second call does nothing.
export default async function run(namespace) {
	if (started) return;
	started = true;
	let value;
	try {
		const f = namespace[CONFIG.export];
		if (typeof f !== "function") {
			throw new TypeErrorClass("module " + CONFIG.module + " has no exported function " + CONFIG.export);
		}
		value = await f(CONFIG.args === undefined ? undefined : parse(CONFIG.args));
	} catch (e) {
		report("throw", e);
		return;
	}
	reportResult(value);
}
