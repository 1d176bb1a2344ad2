import Foundation
import Testing
import TestSupport

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

extension DamagedStateTests {
    /// The database lost and the outbox's last record cut short by a crash, anywhere in the line
    /// (seeded cut points, and the edges): `init --adopt` cuts the torn line (the file holds whole
    /// lines, and the next record is the next number), and the event that made that record is not
    /// taken when the cut line still names it — delivered again under its id, it is done, the cart
    /// reaching every delta once; when the line no longer names it, adopt names the events that
    /// may have made it. A host whose claim shows it read that record before the crash holds it:
    /// the event stays taken, nothing is applied twice.
    @Test(arguments: [(false, false), (true, false), (false, true)])
    func aLastRecordTornWithTheDatabaseLostIsCutAndItsEventNotTaken(hostReadIt: Bool, movedAway: Bool) throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        /// Records 1 and 2 from e1 and e2, then 3 from e3 — alone in the live file when the host
        /// had moved the file away after applying the first two.
        func made(_ playground: Playground) throws {
            #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
            try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
            for id in ["e1", "e2"] { #expect(try basketSync(["-C", playground.path, "push", "--id", id, "A=+1"]).status == 0) }
            #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
            if movedAway {
                try playground.writeAtomically("cart.json", cartJSON([("A", 2)], syncedThrough: 2))
                #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
                try FileManager.default.moveItem(atPath: playground.path + "/outbox.jsonl", toPath: playground.path + "/../consumed-\(UUID().uuidString)")
            }
            #expect(try basketSync(["-C", playground.path, "push", "--id", "e3", "A=+1"]).status == 0)
            #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        }
        let sample = try Playground()
        try made(sample)
        let whole = Array(sample.read("outbox.jsonl").utf8)
        let lastStart = whole.dropLast().lastIndex(of: 0x0A).map { $0 + 1 } ?? 0
        let lastLength = whole.count - lastStart - 1
        let namedFrom = Array(whole[lastStart...]).firstRange(of: Array(",\"source\":\"e3\"".utf8))!.upperBound
        var cuts = [8, namedFrom - 1, namedFrom, lastLength - 1]
        for _ in 0..<6 { cuts.append(8 + Int(rng.next() % UInt64(lastLength - 8))) }
        for cut in cuts {
            let context = "seed \(seed) (replay: BASKET_SYNC_SEED=\(seed)), cut after \(cut) of \(lastLength) bytes, host read it \(hostReadIt), file moved away \(movedAway)"
            let playground = try Playground()
            try made(playground)
            // The host applied the three records before the crash, or the first two.
            try playground.writeAtomically("cart.json", hostReadIt ? cartJSON([("A", 3)], syncedThrough: 3) : cartJSON([("A", 2)], syncedThrough: 2))
            try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
            let outbox = Array(playground.read("outbox.jsonl").utf8)
            try Data(outbox[..<(lastStart + cut)]).write(to: URL(fileURLWithPath: playground.path + "/outbox.jsonl"))
            let adopted = try basketSync(["-C", playground.path, "init", "--adopt"])
            #expect(adopted.status == 0 && adopted.stdout.contains("record 3 was cut short by a crash"), "\(context): \(adopted.stdout)\(adopted.stderr)")
            let left = playground.read("outbox.jsonl")
            #expect((left.isEmpty || left.hasSuffix("\n")) && Array(left.utf8).count == lastStart, "\(context): the torn line cut")
            // A host that holds the record is not told its claim acknowledges nothing.
            if hostReadIt { #expect(!adopted.stdout.contains("acknowledges") && adopted.stdout.contains("going on after 3"), "\(context): \(adopted.stdout)") }
            let named = cut >= namedFrom
            if !hostReadIt && !named && !movedAway { #expect(adopted.stdout.contains("made it (\"e3\")"), "\(context): \(adopted.stdout)") }
            // The Mealz side delivers e3 again; the host applies what comes.
            #expect(try basketSync(["-C", playground.path, "push", "--id", "e3", "A=+1"]).status == 0)
            #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
            let apply = try basketSync(["-C", playground.path, "apply"])
            #expect(apply.status == 0, "\(context): \(apply.stderr)")
            #expect(!hostReadIt || apply.stdout.contains("synced through 3"), "\(context): \(apply.stdout)")
            let seqs = playground.records("outbox.jsonl").compactMap { $0["seq"] as? Int }
            // Numbered on: after the torn record where the host holds it (its line is gone).
            let first = movedAway ? 3 : 1
            #expect(seqs == (hostReadIt ? [1, 2] : Array(first..<(first + seqs.count))), "\(context): seqs \(seqs)")
            let expected = hostReadIt || named ? 3 : 2
            let lines = products(try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as? [String: Any] ?? [:])
            #expect(lines["A"] == expected, "\(context): \(playground.read("cart.json"))")
        }
    }
}

