package tsdecl_test

import (
	"encoding/json"
	"fmt"

	"github.com/enclave-mcp/enclave/codemode/tsdecl"
)

func ExampleDeclare() {
	fmt.Print(tsdecl.Declare("codemode", []tsdecl.Func{
		{
			Name:        "secretList",
			Description: "Lists the signed-in user's secrets by name: names, descriptions and times, never values.",
			Input: json.RawMessage(`{"type":"object","properties":{
				"limit":{"type":"integer","description":"page size, 1 to 1000","default":50},
				"cursor":{"type":"string","description":"the nextCursor of the previous page"}},
				"additionalProperties":false}`),
			Output: json.RawMessage(`{"type":"object","properties":{
				"secrets":{"type":["null","array"],"items":{"type":"object","properties":{
					"name":{"type":"string"},
					"allowedHosts":{"type":["null","array"],"items":{"type":"string"}},
					"expiresAt":{"type":["null","string"],"format":"date-time"}},
					"required":["name","allowedHosts"],"additionalProperties":false}},
				"nextCursor":{"type":"string"}},
				"required":["secrets"],"additionalProperties":false}`),
		},
		{
			Name:        "secretDelete",
			Description: "Deletes one of the signed-in user's secrets by name.",
			Input:       json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`),
			Output:      json.RawMessage(`{"type":"object","properties":{"deleted":{"type":"boolean"}},"required":["deleted"]}`),
		},
	}))
	// Output:
	// declare const codemode: {
	//   /** Lists the signed-in user's secrets by name: names, descriptions and times, never values. */
	//   secretList(args?: {
	//     /** page size, 1 to 1000; default: 50 */
	//     limit?: number;
	//     /** the nextCursor of the previous page */
	//     cursor?: string;
	//   }): Promise<{
	//     secrets: Array<{
	//       name: string;
	//       allowedHosts: string[] | null;
	//       /** date-time */
	//       expiresAt?: string | null;
	//     }> | null;
	//     nextCursor?: string;
	//   }>;
	//   /** Deletes one of the signed-in user's secrets by name. */
	//   secretDelete(args: { name: string }): Promise<{ deleted: boolean }>;
	// };
}

func ExampleType() {
	fmt.Println(tsdecl.Type(json.RawMessage(`{"anyOf":[{"type":"string","enum":["open","closed"]},{"type":"null"}]}`)))
	fmt.Println(tsdecl.Type(json.RawMessage(`{"type":"object","additionalProperties":{"type":"integer"}}`)))
	// Output:
	// "open" | "closed" | null
	// { [key: string]: number }
}
