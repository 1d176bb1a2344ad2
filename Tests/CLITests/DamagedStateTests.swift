import Foundation
import Testing

/// A damaged database, or a rotated part that is not basket-sync's, gets the advice that works
/// for it (docs/spec.md §7): followed as written, it mends the directory.
@Suite struct DamagedStateTests {
    func syncDirectoryWithRecords() throws -> Playground {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
        for sku in ["A", "B", "C"] { #expect(try basketSync(["-C", playground.path, "push", "\(sku)=+1"]).status == 0) }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        return playground
    }

    /// Runs the `mv … && basket-sync init --adopt` a message advises, as a shell would.
    func followAdvice(_ message: String, in playground: Playground) throws {
        let words = message.split(separator: " ").map(String.init)
        let mv = try #require(words.firstIndex(of: "(mv"), "no mv advised: \(message)")
        let from = words[mv + 1], to = String(words[mv + 2].dropLast())
        #expect(rename(from, to) == 0, "mv \(from) \(to)")
        #expect(message.contains("basket-sync init --adopt"), "\(message)")
        let adopted = try basketSync(["-C", playground.path, "init", "--adopt"])
        #expect(adopted.status == 0, "\(adopted.stderr)")
    }

    /// A database cut in half, or emptied: every command says it is damaged (74) and advises
    /// moving it aside and adopting the files; followed, `sync` works and the records go on.
    @Test(arguments: ["cut", "emptied"])
    func aDamagedDatabaseIsSaidWithTheWayOut(damage: String) throws {
        let playground = try syncDirectoryWithRecords()
        let database = playground.path + "/.basket-sync/state.db"
        #expect(try basketSync(["-C", playground.path, "status"]).status == 0)  // checkpointed, closed
        var info = stat()
        #expect(stat(database, &info) == 0)
        for companion in ["-wal", "-shm"] { unlink(database + companion) }
        #expect(truncate(database, damage == "cut" ? info.st_size / 2 : 0) == 0)
        #expect(try basketSync(["-C", playground.path, "push", "D=+1"]).status == 0)
        let sync = try basketSync(["-C", playground.path, "sync"])
        #expect(sync.status == 74, "\(sync.stderr)")
        try followAdvice(sync.stderr, in: playground)
        let again = try basketSync(["-C", playground.path, "sync"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(playground.records("outbox.jsonl").compactMap { $0["seq"] as? Int } == [1, 2, 3, 4])
    }

    /// A forged `outbox.jsonl.1` holding record 5000, older by its name than `outbox.jsonl`
    /// (which starts at 1): `status` names it as not basket-sync's — not "database behind" — and
    /// `sync` and `status` agree; moved away, nothing is said.
    @Test func aForgedRotatedPartIsNotADatabaseBehind() throws {
        let playground = try syncDirectoryWithRecords()
        try playground.write("outbox.jsonl.1", "{\"seq\":5000,\"id\":\"x-5000\",\"type\":\"updateBasket\",\"at\":\"2026-01-01T00:00:00.000Z\",\"products\":[{\"id\":\"Z\",\"quantity\":9}]}\n")
        let status = try basketSync(["-C", playground.path, "status"])
        #expect(status.status == 0, "\(status.stderr)")
        #expect(!status.stdout.contains("database behind"), "\(status.stdout)")
        #expect(status.stdout.contains("outbox.jsonl.1: holds record 5000") && status.stdout.contains("not basket-sync's"), "\(status.stdout)")
        #expect(try basketSync(["-C", playground.path, "push", "D=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect(playground.records("outbox.jsonl").last?["seq"] as? Int == 4)
        try FileManager.default.removeItem(atPath: playground.path + "/outbox.jsonl.1")
        #expect(!(try basketSync(["-C", playground.path, "status"]).stdout.contains("not basket-sync's")))
    }
}
