import Foundation
import Testing
import TestSupport

/// Acknowledgements checked by causality (docs/spec.md §4 rule 4), end to end with the binary: a
/// cart version acknowledges only the records that existed when it was written; a claim beyond
/// the outbox acknowledges nothing; an honest claim is never refused for its value; `wait` and
/// `apply` go by one host progress.
@Suite struct CausalityTests {
    func syncDirectory() throws -> Playground {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        return playground
    }

    @discardableResult
    func run(_ playground: Playground, _ arguments: [String]) throws -> Run {
        let result = try basketSync(["-C", playground.path] + arguments)
        #expect(result.status == 0, "\(arguments): \(result.stdout) \(result.stderr)")
        return result
    }

    func cartLines(_ playground: Playground) throws -> [String: Int] {
        products(try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as? [String: Any] ?? [:])
    }

    /// #1 A+1 and #2 B+1, a cart claiming 5 (beyond the outbox), then #3–#5 each `sku`+1.
    func claimBeyondThenMore(_ sku: String) throws -> Playground {
        let playground = try syncDirectory()
        try run(playground, ["push", "--id", "e1", "A=+1"])
        try run(playground, ["push", "--id", "e2", "B=+1"])
        try run(playground, ["sync"])
        try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 5))
        try run(playground, ["sync"])
        for index in 3...5 { try run(playground, ["push", "--id", "e\(index)", "\(sku)=+1"]) }
        try run(playground, ["sync"])
        return playground
    }

    /// A host that applied #1 (A:1), then wrote a cart whose counter runs ahead: it claims 2
    /// while only #1 exists.
    func counterRunAhead() throws -> Playground {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
        try run(playground, ["sync"])
        try run(playground, ["push", "--id", "e1", "A=+1"])
        try run(playground, ["sync"])
        try run(playground, ["apply"])
        try playground.writeAtomically("cart.json", cartJSON([("A", 1)], syncedThrough: 2))
        try run(playground, ["sync"])
        return playground
    }

    func pendingCount(_ playground: Playground) throws -> Int {
        let status = try JSONSerialization.jsonObject(with: Data(try run(playground, ["status", "--json"]).stdout.utf8)) as? [String: Any]
        return (status?["pending"] as? [Any])?.count ?? -1
    }

    /// A cart claiming 5 written before any record; six events arrive before the next `sync`
    /// (cron): the pass takes the inbox first, then the cart — which was on disk before #1 and
    /// acknowledges none of them. apply then applies all six.
    @Test func aCartWrittenBeforeTheRecordsAcknowledgesNoneOfThem() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([("X", 1)], syncedThrough: 5))
        for index in 1...6 { try run(playground, ["push", "--id", "e\(index)", "A=+1"]) }
        try run(playground, ["sync"])
        #expect(try pendingCount(playground) == 6, "nothing the cart could not have seen is settled")
        let applied = try run(playground, ["apply", "--json"])
        #expect(applied.stdout.contains("\"applied\":[1,2,3,4,5,6]"), "\(applied.stdout)")
        #expect(try cartLines(playground) == ["X": 1, "A": 6])
    }

    /// After a claim beyond the outbox, the host applies honestly and writes a claim that happens
    /// to equal the old one: it acknowledges what it covers (the old rule "the same claim again
    /// acknowledges nothing" left the records pending, and `wait` listed them for ever).
    @Test func anHonestClaimEqualToAnEarlierBogusOneAcknowledges() throws {
        let playground = try claimBeyondThenMore("C")
        // The host applies #1–#5 itself and says so.
        try playground.writeAtomically("cart.json", cartJSON([("A", 1), ("B", 1), ("C", 3)], syncedThrough: 5))
        try run(playground, ["sync"])
        #expect(try pendingCount(playground) == 0)
        let wait = try basketSync(["-C", playground.path, "wait", "--timeout", "0"])
        #expect(wait.status == 75 && wait.stdout.isEmpty, "nothing left to apply: \(wait.stdout)")
        let applied = try run(playground, ["apply", "--json"])
        #expect(applied.stdout.contains("\"applied\":[]"), "\(applied.stdout)")
        #expect(try cartLines(playground) == ["A": 1, "B": 1, "C": 3])
    }

    /// A claim refused is kept with the bytes of every version that made it, said or not: the
    /// same claim in a later version of other bytes is not reported again, but that version,
    /// restored once the records it claims exist, still acknowledges nothing.
    @Test func aRepeatedRefusedClaimKeepsEachVersionRefused() throws {
        let playground = try syncDirectory()
        try run(playground, ["push", "--id", "e1", "A=+1"])
        try run(playground, ["push", "--id", "e2", "A=+1"])
        try run(playground, ["sync"])
        try playground.writeAtomically("cart.json", cartJSON([("Z", 1)], syncedThrough: 5))
        #expect(try run(playground, ["sync"]).stderr.contains("syncedThrough 5"), "said once")
        try run(playground, ["push", "--id", "e3", "A=+1"])
        let second = cartJSON([("Z", 2)], syncedThrough: 5)
        try playground.writeAtomically("cart.json", second)
        #expect(!(try run(playground, ["sync"]).stderr.contains("syncedThrough 5")), "the same claim is not said again")
        try playground.writeAtomically("cart.json", cartJSON([("A", 3)], syncedThrough: 3))
        try run(playground, ["sync"])
        for index in 4...5 { try run(playground, ["push", "--id", "e\(index)", "A=+1"]) }
        try run(playground, ["sync"])
        // The second version brought back in place, now that record 5 exists.
        try playground.write("cart.json", second)
        try run(playground, ["sync"])
        let status = try JSONSerialization.jsonObject(with: Data(try run(playground, ["status", "--json"]).stdout.utf8)) as? [String: Any]
        #expect(status?["hostProgress"] as? Int == 3, "the restored version acknowledges nothing: \(String(describing: status?["hostProgress"]))")
    }

    /// A backup of the database restored after the readers consumed the JSON Lines files (theirs
    /// to remove): nothing in the files shows the loss, but the cart apply wrote claims records
    /// the restored database does not have. apply and wait refuse (74) and change nothing — the
    /// units the cart holds are never applied twice, its claim never written back lower — with
    /// both ways out; a backup as new as the cart put back, apply goes on where it was.
    @Test func aDatabaseRestoredBehindTheCartIsRefusedByApplyAndWait() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
        try run(playground, ["push", "--id", "e1", "A=+1"])
        try run(playground, ["sync"])
        let state = playground.path + "/.basket-sync"
        let older = playground.path + "/older-backup"
        try FileManager.default.copyItem(atPath: state, toPath: older)
        try run(playground, ["push", "--id", "e2", "A=+2"])
        try run(playground, ["sync"])
        try run(playground, ["apply"])
        try run(playground, ["sync"])
        let newer = playground.path + "/newer-backup"
        try FileManager.default.copyItem(atPath: state, toPath: newer)
        let applied = playground.read("cart.json")
        #expect(try cartLines(playground) == ["A": 3])
        for file in ["outbox.jsonl", "notifications.jsonl"] { try FileManager.default.removeItem(atPath: playground.path + "/" + file) }
        try FileManager.default.removeItem(atPath: state)
        try FileManager.default.copyItem(atPath: older, toPath: state)
        // The database as status shows it, but for the ages that grow by themselves.
        func database() throws -> String {
            try run(playground, ["status", "--json"]).stdout.replacingOccurrences(of: #""ageSeconds":[0-9.e-]+"#, with: "", options: .regularExpression)
        }
        let before = try database()
        for command in [["apply"], ["wait", "--timeout", "0"]] {
            let refused = try basketSync(["-C", playground.path] + command)
            #expect(refused.status == 74 && refused.stdout.isEmpty, "\(command): \(refused.stdout) \(refused.stderr)")
            #expect(refused.stderr.contains("says \"syncedThrough\" 2, beyond the outbox's last record (1)") && refused.stderr.contains("Restore .basket-sync/ from a backup at least as new as the cart"), "\(refused.stderr)")
            #expect(playground.read("cart.json") == applied, "\(command): the cart is left as it was")
            // Nothing taken nor written: no notification of the cart, no file made again.
            for file in ["outbox.jsonl", "notifications.jsonl"] {
                #expect(!FileManager.default.fileExists(atPath: playground.path + "/" + file), "\(command) wrote \(file)")
            }
            let after = try database()
            #expect(after == before, "\(command) changed the database: \(before)\n\(after)")
        }
        // The newer backup put back: nothing left to apply, nothing applied twice.
        try FileManager.default.removeItem(atPath: state)
        try FileManager.default.copyItem(atPath: newer, toPath: state)
        let again = try run(playground, ["apply", "--json"])
        #expect(again.stdout.contains("\"applied\":[]"), "\(again.stdout)")
        #expect(try cartLines(playground) == ["A": 3])
    }

    /// `apply` killed after renaming its cart and before recording what it applied (the cart it
    /// wrote is on disk, the database knows nothing of it), after an earlier claim beyond the
    /// outbox: the next `apply` reads the cart written after its records and applies nothing twice.
    @Test func anApplyKilledAfterItsRenameIsRecognisedByTheCartItWrote() throws {
        let playground = try claimBeyondThenMore("B")
        // What apply writes, renamed in place, nothing recorded after it.
        try playground.writeAtomically("cart.json", cartJSON([("A", 1), ("B", 4)], syncedThrough: 5))
        let again = try run(playground, ["apply", "--json"])
        #expect(again.stdout.contains("\"applied\":[]"), "\(again.stdout)")
        #expect(try cartLines(playground) == ["A": 1, "B": 4])
    }

    /// `init --adopt` reads a cart with `"syncedThrough": 0` as an acknowledging host's: its
    /// unapplied batch is pending again, so the WebView repeating its state pushes nothing, and
    /// the host's cart ends with the units once.
    @Test func adoptionTakesAClaimOfZeroAsAnAcknowledgingHost() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
        try run(playground, ["push", "--id", "e1", "A=+2"])
        try run(playground, ["sync"])
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
        try run(playground, ["init", "--adopt"])
        try run(playground, ["push", "--state", "--id", "s1", "A=2"])
        try run(playground, ["sync"])
        #expect(playground.records("outbox.jsonl").count == 1, "the repeated state pushed nothing: \(playground.read("outbox.jsonl"))")
        try run(playground, ["apply"])
        #expect(try cartLines(playground) == ["A": 2])
    }

    /// Echoes by causality too (docs/spec.md §4 rule 5): a tree's cart the host made with the
    /// shopper's A:1 before the first pass, then a Mealz A+1 arriving before that pass, is not the
    /// echo of the batch (it was on disk before it): apply applies it, the cart ends at A:2.
    @Test func aTreeCartWrittenBeforeItsFirstBatchDoesNotEchoIt() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init", "--tree"]).status == 0)
        try FileManager.default.createDirectory(at: playground.url("c"), withIntermediateDirectories: true)
        try playground.writeAtomically("c/cart.json", #"{"products":[{"id":"A","quantity":1}]}"#)
        #expect(try basketSync(["-C", playground.path + "/c", "push", "--id", "e1", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let applied = try basketSync(["-C", playground.path + "/c", "apply", "--json"])
        #expect(applied.status == 0 && applied.stdout.contains("\"applied\":[1]"), "\(applied.stdout) \(applied.stderr)")
        let lines = products(try JSONSerialization.jsonObject(with: Data(playground.read("c/cart.json").utf8)) as? [String: Any] ?? [:])
        #expect(lines == ["A": 2])
    }

    /// An acknowledging host never echoes (docs/spec.md §4 rule 4): one cart of its without
    /// syncedThrough (a shopper-edit path that drops the field) showing the shopper's own A+1 is
    /// not taken as the echo of pending #1; apply still applies #1.
    @Test func anAcknowledgingHostsCartWithoutTheFieldEchoesNothing() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        try run(playground, ["sync"])
        try run(playground, ["push", "--id", "e1", "A=+1"])
        try run(playground, ["sync"])
        // The shopper adds one A by hand; the host's edit path drops syncedThrough.
        try playground.writeAtomically("cart.json", cartJSON([("X", 1), ("A", 1)]))
        try run(playground, ["sync"])
        #expect(try pendingCount(playground) == 1, "#1 is not echoed by an acknowledging host's cart")
        try playground.writeAtomically("cart.json", cartJSON([("X", 1), ("A", 1)], syncedThrough: 0))
        let applied = try run(playground, ["apply", "--json"])
        #expect(applied.stdout.contains("\"applied\":[1]"), "\(applied.stdout)")
        #expect(try cartLines(playground) == ["X": 1, "A": 2])
    }

    /// Two deliveries in one clock tick without Maildir names (docs/spec.md §4 rule 6): a scanning
    /// pass cannot tell their order; it takes them by name and says so, in its log and in `status`.
    @Test func deliveriesInOneTickWithoutMaildirNamesAreReported() throws {
        var tied = false
        for attempt in 0..<50 where !tied {
            let playground = try syncDirectory()
            for (name, body) in [("b-\(attempt)", #"{"id":"d","type":"basketDelta","products":[{"id":"A","quantity":1}]}"#),
                                 ("a-\(attempt)", #"{"id":"s","type":"basketState","products":[{"id":"A","quantity":1}]}"#)] {
                try playground.write("inbox/tmp/\(name)", body)
            }
            // Two renames in quick succession; a pair the kernel gave two change times is tried again.
            #expect(rename(playground.path + "/inbox/tmp/b-\(attempt)", playground.path + "/inbox/new/b-\(attempt)") == 0)
            #expect(rename(playground.path + "/inbox/tmp/a-\(attempt)", playground.path + "/inbox/new/a-\(attempt)") == 0)
            var times: [timespec] = []
            for name in ["a", "b"] {
                var info = stat()
                #expect(lstat(playground.path + "/inbox/new/\(name)-\(attempt)", &info) == 0)
                times.append(info.st_ctim)
            }
            guard times[0].tv_sec == times[1].tv_sec && times[0].tv_nsec == times[1].tv_nsec else { continue }
            tied = true
            let sync = try basketSync(["-C", playground.path, "sync"])
            #expect(sync.stderr.contains("order unknown between"), "\(sync.stderr)")
            let status = try run(playground, ["status"])
            #expect(status.stdout.contains("inbox order: at ") && status.stdout.contains("deliver with Maildir names"), "\(status.stdout)")
        }
        #expect(tied, "no two renames shared a change time in 50 tries: the kernel's clock is finer here")
    }

    /// The version of a cart is its content's: a chmod (the change time moves, nothing is
    /// written) does not make a cart written before record 2 one written after it, which would
    /// acknowledge record 2 unapplied.
    @Test func aMetadataChangeDoesNotMakeAnOldCartNew() throws {
        let playground = try counterRunAhead()
        try run(playground, ["push", "--id", "e2", "A=+2"])
        try run(playground, ["sync"])
        #expect(chmod(playground.path + "/cart.json", 0o644) == 0)
        try run(playground, ["sync"])
        let applied = try run(playground, ["apply", "--json"])
        #expect(applied.stdout.contains("\"applied\":[2]"), "\(applied.stdout)")
        #expect(try cartLines(playground) == ["A": 3])
    }

    /// The same bytes are the same version, whatever their times or inode: a cart written before
    /// record 2, stamped again (`touch`), or copied with its times (`cp -p`, then renamed over)
    /// or without them, does not acknowledge record 2 unapplied — `apply` applies it.
    @Test(arguments: ["touch", "copy keeping its times", "copy"])
    func aCartWithTheBytesOfAnOldVersionIsThatVersion(how: String) throws {
        let playground = try counterRunAhead()
        try run(playground, ["push", "--id", "e2", "A=+2"])
        try run(playground, ["sync"])
        let path = playground.path + "/cart.json"
        switch how {
        case "touch":
            #expect(utimensat(AT_FDCWD, path, nil, 0) == 0)
        default:
            let before = try FileManager.default.attributesOfItem(atPath: path)
            let copy = playground.path + "/.cart.copy"
            #expect(FileManager.default.createFile(atPath: copy, contents: Data(playground.read("cart.json").utf8)))
            if how == "copy keeping its times", let modified = before[.modificationDate] as? Date {
                try FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: copy)
            }
            #expect(rename(copy, path) == 0)
        }
        try run(playground, ["sync"])
        let applied = try run(playground, ["apply", "--json"])
        #expect(applied.stdout.contains("\"applied\":[2]"), "\(how): \(applied.stdout)")
        #expect(try cartLines(playground) == ["A": 3], "\(how)")
    }

    /// A seeded host that acknowledges, against a model written from the rule's words: a version
    /// acknowledges a claim only when every claimed record existed when its bytes were first
    /// written (the same bytes are the same version: restored by a copy keeping its times, a
    /// copy, a write in place or a `touch`); `apply` then applies exactly the records after the
    /// highest claim acknowledged. Versions are honest (a prefix of the records applied), or
    /// claim records that do not exist yet (a marked line `Z`, so no honest cart has their bytes).
    @Test func versionsRestoredInAnyOrderAcknowledgeOnlyWhatExistedWhenTheyWereWritten() throws {
        for round in 0..<Knobs.value("BASKET_SYNC_RUNS", default: 3) {
            let seed = Knobs.replaySeed ?? Knobs.seed &+ UInt64(round)
            var rng = SplitMix64(seed: seed)
            let playground = try syncDirectory()
            var deltas: [(sku: String, units: Int)] = []
            var versions: [(text: String, writtenAt: Int, claim: Int)] = []
            var acknowledged = 0
            var log: [String] = []
            func place(_ text: String, how: Int) throws {
                let path = playground.path + "/cart.json"
                switch how {
                case 0:
                    // A copy keeping the times of the file it copies, renamed over the cart.
                    let copy = playground.path + "/.cart.copy"
                    try Data(text.utf8).write(to: URL(fileURLWithPath: copy))
                    var times = [timespec(tv_sec: 1_700_000_000, tv_nsec: 0), timespec(tv_sec: 1_700_000_000, tv_nsec: 0)]
                    #expect(utimensat(AT_FDCWD, copy, &times, 0) == 0)
                    #expect(rename(copy, path) == 0)
                case 1: try playground.write("cart.json", text)
                default: try playground.writeAtomically("cart.json", text)
                }
            }
            for _ in 0..<24 {
                let last = deltas.count
                switch rng.below(10) {
                case 0...2:
                    let delta = (["A", "B"][rng.below(2)], 1 + rng.below(3))
                    deltas.append(delta)
                    try run(playground, ["push", "--id", "e\(deltas.count)", "\(delta.0)=+\(delta.1)"])
                    log.append("record \(deltas.count) \(delta.0)+\(delta.1)")
                case 3...5:
                    // An honest host: the records through k applied, with its own C.
                    let k = rng.below(last + 1)
                    var lines: [String: Int] = ["C": 1 + rng.below(2)]
                    for delta in deltas.prefix(k) { lines[delta.sku, default: 0] += delta.units }
                    let text = cartJSON(lines.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }, syncedThrough: k)
                    versions.append((text, last, k))
                    try place(text, how: 2)
                    log.append("honest cart syncedThrough \(k)")
                case 6...7:
                    // A counter ahead of the outbox.
                    let claim = last + 1 + rng.below(3)
                    let text = cartJSON([("Z", 1 + rng.below(2))], syncedThrough: claim)
                    versions.append((text, last, claim))
                    try place(text, how: 2)
                    log.append("cart claiming \(claim) while the outbox ends at \(last)")
                case 8:
                    guard !versions.isEmpty else { continue }
                    let version = versions[rng.below(versions.count)]
                    let how = rng.below(3)
                    try place(version.text, how: how)
                    log.append("restored (\(["copy keeping times", "write in place", "copy"][how])) \(version.text.dropLast())")
                default:
                    guard !versions.isEmpty else { continue }
                    #expect(utimensat(AT_FDCWD, playground.path + "/cart.json", nil, 0) == 0)
                    log.append("touch")
                }
                try run(playground, ["sync"])
                // The model: the bytes on disk were first written when the outbox ended at the
                // earliest `writtenAt` of a version with those bytes.
                let text = playground.read("cart.json")
                if let first = versions.filter({ $0.text == text }).map(\.writtenAt).min(), let claim = versions.first(where: { $0.text == text })?.claim,
                   claim <= first {
                    acknowledged = max(acknowledged, claim)
                }
            }
            // A cart on disk claiming beyond the outbox: where the host got to cannot be known, and
            // apply refuses (74), the cart untouched; else it applies the records after the highest
            // claim acknowledged.
            let onDisk = playground.read("cart.json")
            let claimOnDisk = versions.first(where: { $0.text == onDisk })?.claim ?? 0
            let applied = try basketSync(["-C", playground.path, "apply", "--json"])
            let context = "seed \(seed) (BASKET_SYNC_SEED=\(seed) replays it): \(applied.stdout) \(applied.stderr)\n\(log.joined(separator: "\n"))"
            if claimOnDisk > deltas.count {
                #expect(applied.status == 74 && applied.stderr.contains("beyond the outbox's last record (\(deltas.count))"), "\(context)")
                #expect(playground.read("cart.json") == onDisk, "\(context)")
                continue
            }
            #expect(applied.status == 0, "\(context)")
            let report = try JSONSerialization.jsonObject(with: Data(applied.stdout.utf8)) as? [String: Any]
            let expected = deltas.count > acknowledged ? Array((acknowledged + 1)...deltas.count) : []
            #expect((report?["applied"] as? [Int] ?? [-1]) == expected, "\(context)")
        }
    }

    /// A host without syncedThrough that goes back to lines it had before writes a new version:
    /// its bytes say nothing of what it applied, so they are judged by the file's identity — the
    /// echo of #2 (A−1 back to A:1, the bytes of the cart that stood at #1) settles #2.
    @Test func aHostWithoutTheCounterGoingBackToTheSameLinesWritesANewVersion() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([("A", 1)]))
        try run(playground, ["sync"])
        try run(playground, ["push", "--id", "e1", "A=+1"])
        try run(playground, ["sync"])
        try playground.writeAtomically("cart.json", cartJSON([("A", 2)]))
        try run(playground, ["sync"])
        #expect(try pendingCount(playground) == 0, "#1 echoed")
        try run(playground, ["push", "--id", "e2", "A=-1"])
        try run(playground, ["sync"])
        try playground.writeAtomically("cart.json", cartJSON([("A", 1)]))
        try run(playground, ["sync"])
        #expect(try pendingCount(playground) == 0, "#2 echoed by a cart with the bytes of the one at #1")
        #expect(try run(playground, ["apply", "--json"]).stdout.contains("\"applied\":[]"))
        #expect(try cartLines(playground) == ["A": 1])
    }

    /// After a lost database, `init --adopt` checks the cart's claim by causality too (by the
    /// records' times and the cart's last write): a cart written before record 2 that claims it
    /// does not acknowledge it, and apply applies it.
    @Test func adoptionDoesNotTakeAStaleClaim() throws {
        let playground = try counterRunAhead()
        // Record 2 is made strictly after the cart's last write (a later millisecond).
        let written = try FileManager.default.attributesOfItem(atPath: playground.path + "/cart.json")[.modificationDate] as? Date ?? Date()
        while Date().timeIntervalSince(written) < 0.005 { usleep(1_000) }
        try run(playground, ["push", "--id", "e2", "A=+2"])
        try run(playground, ["sync"])
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
        // The claim refused by the cart's time is said, with what to do if the time is wrong.
        let adopted = try run(playground, ["init", "--adopt"])
        #expect(adopted.stdout.contains("the cart claims syncedThrough 2 but was last modified before record 2 was made"), "\(adopted.stdout)")
        let applied = try run(playground, ["apply", "--json"])
        #expect(applied.stdout.contains("\"applied\":[2]"), "\(applied.stdout)")
        #expect(try cartLines(playground) == ["A": 3])
    }

    /// A host without syncedThrough that applied B (#2) but not A (#1), beside the shopper's own
    /// A:1: the cart shows #2, not #1 — only #2 settles (docs/spec.md §4 rule 5); #1 waits for
    /// its echo or its window.
    @Test func aLaterEchoDoesNotSettleAnEarlierBatch() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", #"{"products":[{"id":"A","quantity":1}]}"#)
        try run(playground, ["sync"])
        try run(playground, ["push", "--id", "e1", "A=+1"])
        try run(playground, ["push", "--id", "e2", "B=+1"])
        try run(playground, ["sync"])
        try playground.writeAtomically("cart.json", #"{"products":[{"id":"A","quantity":1},{"id":"B","quantity":1}]}"#)
        try run(playground, ["sync"])
        let status = try JSONSerialization.jsonObject(with: Data(try run(playground, ["status", "--json"]).stdout.utf8)) as? [String: Any]
        let pending = (status?["pending"] as? [[String: Any]])?.compactMap { $0["seq"] as? Int }
        #expect(pending == [1], "\(String(describing: status?["pending"]))")
    }

    /// docs/spec.md §4 rule 7: a recorded payment closes the basket and says so at once (a
    /// notification of the new basket); the WebView repeating the paid basket's state, based on
    /// the closed basket, is stale and pushes nothing, where it used to push the paid units again.
    @Test func aStateBasedOnAPaidBasketPushesNothing() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
        try run(playground, ["sync"])
        try run(playground, ["set-store", "s1", "--mode", "retailer"])
        try run(playground, ["push", "A=+2"])
        try run(playground, ["sync"])
        try run(playground, ["apply"])
        try run(playground, ["sync"])
        #expect(products(playground.records("notifications.jsonl").last!) == ["A": 2])
        #expect(playground.records("notifications.jsonl").last!["basket"] as? Int == 1)
        try run(playground, ["handle-payment", "--total", "5.00", "--order-id", "o1"])
        let opened = playground.records("notifications.jsonl").last!
        #expect(opened["basket"] as? Int == 2 && products(opened).isEmpty, "the new basket is told at once: \(opened)")
        try run(playground, ["push", "--state", "--basket", "1", "A=2"])
        try run(playground, ["sync"])
        #expect(try pendingCount(playground) == 0, "a stale state pushes nothing")
        let status = try run(playground, ["status", "--json"]).stdout
        #expect(status.contains("\"staleStates\":1"), "\(status)")
        try run(playground, ["apply"])
        #expect(try cartLines(playground) == ["A": 2])
        // A state for the current basket (push reads it from the database) is diffed.
        try run(playground, ["push", "--state", "A=1"])
        try run(playground, ["sync"])
        #expect(playground.records("outbox.jsonl").last.map(products) == ["A": 1])
    }

    /// init --adopt where the cart's claim is ahead of the last notification (the host applied
    /// #2 and #3, the database was lost before basket-sync took that cart): the deltas it
    /// acknowledges are Mealz's share, and a payment counts all three units.
    @Test func adoptionCountsWhatTheCartsClaimAcknowledges() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
        try run(playground, ["sync"])
        for _ in 1...3 { try run(playground, ["push", "A=+1"]) }
        try run(playground, ["sync"])
        try playground.writeAtomically("cart.json", cartJSON([("A", 1)], syncedThrough: 1))
        try run(playground, ["sync"])
        try playground.writeAtomically("cart.json", cartJSON([("A", 3)], syncedThrough: 3))
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
        try run(playground, ["init", "--adopt"])
        try run(playground, ["sync"])
        try run(playground, ["set-store", "s1", "--mode", "retailer"])
        try run(playground, ["handle-payment", "--total", "3", "--order-id", "o1"])
        #expect(products(playground.records("payments.jsonl").last!, key: "mealzProducts") == ["A": 3])
    }

    /// init --adopt after a host that never acknowledged had #1–#3 echoed, then started writing
    /// syncedThrough 0 (moving to apply): the echoes are found again from the files' history, and
    /// apply applies nothing twice.
    @Test func adoptionFindsTheBatchesALegacyHostEchoed() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([]))
        try run(playground, ["sync"])
        for index in 1...3 {
            try run(playground, ["push", "A=+1"])
            try run(playground, ["sync"])
            try playground.writeAtomically("cart.json", cartJSON([("A", index)]))
            try run(playground, ["sync"])
        }
        try playground.writeAtomically("cart.json", cartJSON([("A", 3)], syncedThrough: 0))
        try run(playground, ["sync"])
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
        try run(playground, ["init", "--adopt"])
        let wait = try basketSync(["-C", playground.path, "wait", "--timeout", "0"])
        #expect(wait.status == 75 && wait.stdout.isEmpty, "nothing to apply: \(wait.stdout)")
        try run(playground, ["apply"])
        #expect(try cartLines(playground) == ["A": 3])
    }

    /// init --adopt when the host removed outbox.jsonl and the database was lost while record #4
    /// (B+1) waited: the loss is named, and the next record is not numbered 4 again (a host that
    /// had read the old #4 would acknowledge the new one unapplied).
    @Test func adoptionAfterTheOutboxWentAwayReusesNoSeq() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
        try run(playground, ["sync"])
        for _ in 1...3 { try run(playground, ["push", "A=+1"]) }
        try run(playground, ["sync"])
        try run(playground, ["apply"])
        try run(playground, ["sync"])
        try run(playground, ["push", "B=+1"])
        try run(playground, ["sync"])
        try FileManager.default.removeItem(atPath: playground.path + "/outbox.jsonl")
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
        let adopted = try run(playground, ["init", "--adopt"])
        #expect(adopted.stdout.contains("no record is left, and inbox/cur/ holds events that may have made records after the cart's claim 3 (record 4 at most)"), "\(adopted.stdout)")
        try run(playground, ["push", "C=+1"])
        try run(playground, ["sync"])
        #expect(playground.records("outbox.jsonl").last?["seq"] as? Int == 5)
    }

    /// init --adopt with no record left, where the host wrote its cart after record #2 without
    /// applying it (a shopper's edit, still claiming 1): inbox/cur/ holds the two events taken,
    /// each of which made at most one record, so records go on after 2 — never numbering a new
    /// record 2 (the old #2 is named lost, not replaced by another).
    @Test func adoptionNumbersAfterEveryEventTakenWhenNoRecordIsLeft() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
        try run(playground, ["sync"])
        try run(playground, ["push", "--id", "e1", "A=+1"])
        try run(playground, ["sync"])
        try run(playground, ["apply"])
        try run(playground, ["sync"])
        try run(playground, ["push", "--id", "e2", "A=+1"])
        try run(playground, ["sync"])
        try playground.writeAtomically("cart.json", cartJSON([("A", 1), ("X", 1)], syncedThrough: 1))
        try run(playground, ["sync"])
        // Rotated away into a file basket-sync cannot read (logrotate's compress), then the loss.
        try FileManager.default.moveItem(atPath: playground.path + "/outbox.jsonl", toPath: playground.path + "/outbox.jsonl.1.gz")
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
        let adopted = try run(playground, ["init", "--adopt"])
        #expect(adopted.stdout.contains("(record 2 at most)") && adopted.stdout.contains("records go on after 2"), "\(adopted.stdout)")
        try run(playground, ["push", "--id", "e3", "B=+1"])
        try run(playground, ["sync"])
        #expect(playground.records("outbox.jsonl").map { $0["seq"] as? Int } == [3])
    }

    /// A transfer that landed stays landed after init --adopt even when no record is left of it
    /// (the outbox rotated away): its event in inbox/cur/ says so, and Mealz redelivering it under
    /// a new event id lands nothing (docs/spec.md §4 rule 2).
    @Test func aTransferLandedBeforeTheLossDoesNotLandAgain() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
        try run(playground, ["sync"])
        try run(playground, ["push", "--id", "evt-t1", "--transfer", "t-9", "A=1"])
        try run(playground, ["sync"])
        try run(playground, ["apply"])
        try run(playground, ["sync"])
        try FileManager.default.moveItem(atPath: playground.path + "/outbox.jsonl", toPath: playground.path + "/outbox.jsonl.1.gz")
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
        try run(playground, ["init", "--adopt"])
        try run(playground, ["push", "--id", "evt-t1-again", "--transfer", "t-9", "A=1"])
        try run(playground, ["sync"])
        #expect(playground.records("outbox.jsonl").isEmpty, "\(playground.read("outbox.jsonl"))")
        try run(playground, ["apply"])
        #expect(try cartLines(playground) == ["A": 1])
    }

    /// An honest cart written in place after record #1 — the same size, its modification time
    /// kept (`touch -r`, a copy keeping times) — claiming 1 is a new version (its lines changed,
    /// only its change time tells), and acknowledges #1: apply applies nothing again.
    @Test func aCartWrittenInPlaceKeepingItsTimeIsANewVersion() throws {
        let playground = try syncDirectory()
        let path = playground.path + "/cart.json"
        try playground.write("cart.json", cartJSON([("A", 0)], syncedThrough: 0))
        try run(playground, ["sync"])
        try run(playground, ["push", "A=+1"])
        try run(playground, ["sync"])
        var before = stat()
        #expect(stat(path, &before) == 0)
        // In place: the same file, the same size.
        let handle = try #require(FileHandle(forWritingAtPath: path))
        try handle.write(contentsOf: Data(cartJSON([("A", 1)], syncedThrough: 1).utf8))
        try handle.close()
        var times = [before.st_atim, before.st_mtim]
        #expect(utimensat(AT_FDCWD, path, &times, 0) == 0)
        var after = stat()
        #expect(stat(path, &after) == 0 && after.st_size == before.st_size && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec && after.st_ino == before.st_ino)
        let wait = try basketSync(["-C", playground.path, "wait", "--timeout", "0"])
        #expect(wait.status == 75, "nothing to apply: \(wait.stdout)")
        try run(playground, ["apply"])
        #expect(try cartLines(playground) == ["A": 1])
    }

    /// init --adopt for a host without syncedThrough, whose cart (the shopper's own A:1) was
    /// written before a pass made #1 (A+1, B+1) and #2 (A−1) and was told after them: the replay
    /// takes it as written before both (the cart's time), as the lost database did — both stay
    /// pending, and the payment after the host applies them counts B, Mealz's, as without the loss.
    @Test(arguments: [false, true])
    func adoptionReplaysACartToldAfterRecordsAsWrittenBefore(adopt: Bool) throws {
        let playground = try syncDirectory()
        try playground.write("basket-sync.json", "{\"pendingTimeoutSeconds\": 3600}")
        try run(playground, ["set-store", "s1", "--mode", "retailer"])
        try playground.writeAtomically("cart.json", "{\"products\":[]}")
        try run(playground, ["sync"])
        try run(playground, ["push", "--id", "r1", "A=+1", "B=+1"])
        try run(playground, ["push", "--id", "r2", "A=-1"])
        try playground.writeAtomically("cart.json", "{\"products\":[{\"id\":\"A\",\"quantity\":1}]}")
        try run(playground, ["sync"])
        if adopt {
            try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
            try run(playground, ["init", "--adopt"])
            try run(playground, ["set-store", "s1", "--mode", "retailer"])
            try run(playground, ["sync"])
        }
        let status = try JSONSerialization.jsonObject(with: Data(try run(playground, ["status", "--json"]).stdout.utf8)) as? [String: Any]
        #expect((status?["pending"] as? [[String: Any]])?.compactMap { $0["seq"] as? Int } == [1, 2], "\(String(describing: status))")
        try playground.writeAtomically("cart.json", "{\"products\":[{\"id\":\"A\",\"quantity\":1},{\"id\":\"B\",\"quantity\":1}]}")
        try run(playground, ["sync"])
        try run(playground, ["handle-payment", "--total", "2.00", "--order-id", "o1"])
        let paid = try #require(playground.records("payments.jsonl").last)
        #expect(paid["status"] as? String == "recorded", "\(paid)")
        #expect(products(paid, key: "mealzProducts") == ["B": 1], "\(paid)")
    }

    /// init --adopt with a cart claiming beyond the files: it acknowledges nothing, and says so.
    @Test func adoptionSaysAClaimBeyondTheFiles() throws {
        let playground = try syncDirectory()
        try run(playground, ["push", "A=+1"])
        try run(playground, ["push", "A=+1"])
        try run(playground, ["sync"])
        try playground.writeAtomically("cart.json", cartJSON([("A", 2)], syncedThrough: 5))
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
        let adopted = try run(playground, ["init", "--adopt"])
        #expect(adopted.stdout.contains("the cart claims syncedThrough 5, beyond the files (they end at 2): it acknowledges nothing"), "\(adopted.stdout)")
        #expect(try run(playground, ["status", "--json"]).stdout.contains("\"hostProgress\":0"))
    }

    /// One host progress for a cart no pass has taken yet (docs/spec.md §4 rule 4): a legacy
    /// host's cart showing #1 is taken as apply takes it, so wait and status do not list the
    /// record apply skips.
    @Test func waitAndStatusSeeAnEchoNoPassHasTakenYet() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([]))
        try run(playground, ["sync"])
        try run(playground, ["push", "A=+1"])
        try run(playground, ["sync"])
        try playground.writeAtomically("cart.json", cartJSON([("A", 1)]))
        #expect(try run(playground, ["status", "--json"]).stdout.contains("\"hostProgress\":1"))
        let wait = try basketSync(["-C", playground.path, "wait", "--timeout", "0"])
        #expect(wait.status == 75 && wait.stdout.isEmpty, "\(wait.stdout)")
        #expect(try run(playground, ["apply", "--json"]).stdout.contains("\"applied\":[]"))
        #expect(try cartLines(playground) == ["A": 1])
    }
}
