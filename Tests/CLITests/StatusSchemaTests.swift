import Foundation
import Testing

/// docs/spec.md §12: `status --json` is a documented interface — docs/schema/status.schema.json
/// (JSON Schema 2020-12), checked here against real output of a sync directory, a tree's root and
/// one of its carts, in several states, by a real validator (Python's jsonschema).
@Suite struct StatusSchemaTests {
    static let schema = SampleTests.root.appendingPathComponent("docs/schema/status.schema.json").path

    /// The validator's complaints about `json` (empty: valid).
    func problems(_ json: String) throws -> [String] {
        let input = FileManager.default.temporaryDirectory.appendingPathComponent("status-\(UUID().uuidString).json")
        try Data(json.utf8).write(to: input)
        defer { try? FileManager.default.removeItem(at: input) }
        let run = try basketSync(["python3", "-c", """
            import json, sys, jsonschema
            schema = json.load(open(sys.argv[1]))
            jsonschema.Draft202012Validator.check_schema(schema)
            for error in jsonschema.Draft202012Validator(schema).iter_errors(json.load(open(sys.argv[2]))):
                print(error.json_path, error.message[:200])
            """, Self.schema, input.path], executable: "/usr/bin/env")
        #expect(run.status == 0, "the validator ran: \(run.stderr)")
        return run.stdout.split(separator: "\n").map(String.init)
    }

    @Test func realOutputMatchesTheSchema() async throws {
        let playground = try Playground()
        let single = playground.path + "/single"
        #expect(try basketSync(["-C", single, "init"]).status == 0)
        #expect(try problems(try basketSync(["-C", single, "status", "--json"]).stdout) == [], "a new directory")
        // Records, a pending batch, a payment, a rejected cart, a bad event, an agent running.
        #expect(try basketSync(["-C", single, "set-store", "s-1", "--mode", "retailer"]).status == 0)
        try playground.write("single/cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        #expect(try basketSync(["-C", single, "push", "A=+2"]).status == 0)
        #expect(try basketSync(["-C", single, "sync"]).status == 0)
        #expect(try basketSync(["-C", single, "handle-payment", "--total", "3", "--order-id", "o-1"]).status == 0)
        try playground.write("single/inbox/new/1.bad", "{")
        try playground.write("single/cart.json", "{")
        _ = try basketSync(["-C", single, "sync"])
        let agent = try AgentProcess(directory: single, environment: ["BASKET_SYNC_HEARTBEAT_SECONDS": "1"])
        try await agent.waitUntilWatching()
        let busy = try basketSync(["-C", single, "status", "--json"]).stdout
        #expect(busy.contains("\"agentState\":\"running\"") || busy.contains("\"agentState\":\"stuck\""), "\(busy)")
        #expect(try problems(busy) == [], "a directory with history and an agent")
        #expect(agent.stop() == 0)

        let root = playground.path + "/tree"
        #expect(try basketSync(["-C", root, "init", "--tree"]).status == 0)
        #expect(try basketSync(["-C", root, "set-store", "s-9", "--mode", "retailer"]).status == 0)
        for id in ["a", "b"] { #expect(try basketSync(["-C", root + "/" + id, "push", "A=+1"]).status == 0) }
        try FileManager.default.createDirectory(atPath: root + "/c", withIntermediateDirectories: false)
        try playground.write("tree/c/cart.json", "[")
        _ = try basketSync(["-C", root, "sync"])
        let tree = try basketSync(["-C", root, "status", "--json"]).stdout
        #expect(try problems(tree) == [], "a tree's root")
        #expect(try problems(try basketSync(["-C", root + "/a", "status", "--json"]).stdout) == [], "a tree's cart")

        // The check can fail: the same output without its health is refused.
        var broken = try JSONSerialization.jsonObject(with: Data(busy.utf8)) as! [String: Any]
        broken["health"] = nil
        let text = String(decoding: try JSONSerialization.data(withJSONObject: broken), as: UTF8.self)
        #expect(try !problems(text).isEmpty, "an output without \"health\" does not match")
    }
}
