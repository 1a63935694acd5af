// Package tsdecl renders JSON Schemas as TypeScript declarations.
//
// In code mode an agent writes JavaScript that calls the server's
// capabilities as `await codemode.<name>(args)`. The execute tool's
// description carries a declaration of those functions, generated here from
// each capability's input and output schema, so that the model writes calls
// with the right argument shapes and reads results with the right fields:
//
//	declare const codemode: {
//	  /** Deletes one of the signed-in user's secrets. */
//	  secretDelete(args: { name: string }): Promise<{ deleted: boolean }>;
//	};
//
// Declare builds that block, Type renders a single schema, and Globals
// declares the other bindings the sandbox offers (fetch, storage, console).
//
// The output is read by a model and counts against its context, so it is
// compact: $refs are resolved inline, small objects stay on one line, and
// a property's description, format and default become a short one-line
// JSDoc comment. Property order follows the schema's raw JSON text, so the
// same schema always gives the same text.
//
// Schemas are JSON Schema draft 2020-12 as produced by
// github.com/google/jsonschema-go (earlier drafts' definitions and
// tuple-form items are understood too). Nothing panics: invalid JSON, an
// unsupported keyword, a reference that does not resolve or a reference
// cycle degrades to `unknown` in that place only.
package tsdecl
