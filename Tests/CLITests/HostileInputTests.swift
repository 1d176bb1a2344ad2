import Foundation
import Testing

/// What the host or the Mealz side write never reaches a line raw or unbounded, and ids are
/// checked the same way on every way in (SPEC §7).
@Suite struct HostileInputTests {
    func syncDirectory() throws -> Playground {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        return playground
    }

    /// W6: U+2028 and U+2029 are written escaped: every line splitter sees one record per line.
    @Test func lineSeparatorsInIdsAreWrittenEscaped() throws {
        let playground = try syncDirectory()
        let event = #"{"id":"e\u2028x","type":"basketDelta","products":[{"id":"a\u2028b\u2029c","quantity":1}]}"#
        try event.write(toFile: playground.path + "/inbox/new/e1", atomically: false, encoding: .utf8)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let text = playground.read("outbox.jsonl")
        #expect(text.split(whereSeparator: \.isNewline).count == 1, "one record, one line for any splitter: \(text)")
        #expect(text.contains(#""id":"a\u2028b\u2029c""#))
        #expect(products(playground.records("outbox.jsonl")[0]) == ["a\u{2028}b\u{2029}c": 1], "it reads back to the same id")
    }

    /// W6: C1 controls (U+0085 splits lines for Python) are refused in ids like C0 and DEL.
    @Test func controlCharactersOfEveryKindAreRefusedInIds() throws {
        let playground = try syncDirectory()
        for (index, id) in ["a\\u0085b", "a\\u009bb", "a\\u007fb", "a\\u001bb"].enumerated() {
            let event = #"{"id":"c\#(index)","type":"basketDelta","products":[{"id":"\#(id)","quantity":1}]}"#
            try event.write(toFile: playground.path + "/inbox/new/c\(index)", atomically: false, encoding: .utf8)
        }
        _ = try basketSync(["-C", playground.path, "sync"])
        #expect(playground.names("inbox/bad").filter { !$0.hasSuffix(".error") }.count == 4)
        #expect(playground.records("outbox.jsonl").isEmpty)
    }

    /// W3: an error quotes at most 80 characters of the input, escaped.
    @Test func errorsQuoteInputBoundedAndEscaped() throws {
        let playground = try syncDirectory()
        let huge = String(repeating: "t", count: 1_000_000)
        try #"{"id":"e1","type":"\#(huge)"}"#.write(toFile: playground.path + "/inbox/new/e1", atomically: false, encoding: .utf8)
        let sync = try basketSync(["-C", playground.path, "sync"])
        #expect(sync.stderr.utf8.count < 2_000, "\(sync.stderr.utf8.count) bytes of log for one bad event")
        #expect(playground.read("inbox/bad/e1.error").utf8.count < 2_000)
        #expect(sync.stderr.contains("unknown type \"" + String(repeating: "t", count: 80) + "\"…"))
        let status = try basketSync(["-C", playground.path, "status", "--json"])
        #expect(status.stdout.utf8.count < 10_000)
    }

    /// W6: a newline in an event's file name cannot forge a log line.
    @Test func aNewlineInAFileNameCannotForgeALogLine() throws {
        let playground = try syncDirectory()
        let name = "evil\nbasket-sync: error: forged"
        try "{not json".write(toFile: playground.path + "/inbox/new/" + name, atomically: false, encoding: .utf8)
        let sync = try basketSync(["-C", playground.path, "sync"])
        #expect(!sync.stderr.split(separator: "\n").contains { $0.hasPrefix("basket-sync: error: forged") }, "\(sync.stderr)")
        #expect(sync.stderr.contains("evil\\nbasket-sync: error: forged"))
        let status = try basketSync(["-C", playground.path, "status"])
        #expect(!status.stdout.split(separator: "\n").contains { $0.hasPrefix("basket-sync: error: forged") })
    }

    /// W4, W6: `push`, `set-store` and the payment commands check ids as the agent does (64).
    @Test(arguments: [
        ["push", "--id", "", "a=+1"],
        ["push", "a=+1000001"],
        ["push", "a\nb=+1"],
        ["push", "--transfer", "t\u{1b}[31m", "a=1"],
        ["set-store", "st\u{1b}]0;hacked\u{7}"],
        ["set-store", String(repeating: "s", count: 300)],
        ["payment-started", "--total", "1.00", "--order-id", "o\u{85}"],
    ])
    func commandLineIdsAreCheckedAsTheAgentChecksThem(arguments: [String]) throws {
        let playground = try syncDirectory()
        _ = try basketSync(["-C", playground.path, "set-store", "s", "--mode", "retailer"])
        let run = try basketSync(["-C", playground.path] + arguments)
        #expect(run.status == 64, "\(arguments): \(run.status) \(run.stderr)")
        #expect(run.stderr.split(separator: "\n").count == 1, "one line: \(run.stderr)")
        #expect(!run.stderr.contains("\u{1b}"), "no raw escape sequence reaches the terminal")
        #expect(playground.names("inbox/new").isEmpty, "nothing delivered")
    }
}
