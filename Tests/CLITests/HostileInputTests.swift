import Foundation
import Testing
import TestSupport

/// What the host or the Mealz side write never reaches a line raw or unbounded, and ids are
/// checked the same way on every way in (docs/spec.md §7).
@Suite struct HostileInputTests {
    func syncDirectory() throws -> Playground {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        return playground
    }

    /// Events the library refuses amid a queue (lines of one id adding up past what a quantity
    /// holds, each line within the limits: only the library's own check sees it) are set aside
    /// alone: every other event of the same pass is taken in delivery order, one batch each,
    /// all of them pending — none lost or doubled by the refused ones taken back. Seeded.
    @Test func eventsRefusedAmidAQueueTakeBackOnlyThemselves() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        let playground = try syncDirectory()
        let dir = playground.path
        // The largest limit a setting allows: each line passes the file's checks.
        let settings = playground.read("basket-sync.json").replacingOccurrences(of: #""maxQuantity": 1000000"#, with: #""maxQuantity": 9007199254740991"#)
        #expect(settings.contains("9007199254740991"))
        try playground.write("basket-sync.json", settings)
        let refusedLines = Array(repeating: #"{"id":"A","quantity":9007199254740991}"#, count: 1_100).joined(separator: ",")
        var taken: [(id: String, products: [String: Int])] = []
        var refused: [String] = []
        let count = 12 + rng.below(20)
        for index in 0..<count {
            // Delivery-time names: the order is the names' (one second apart).
            let name = "\(1_800_000_000 + index).M\(index)P1Q1.host"
            if rng.below(10) < 3 || index == count / 2 {
                try playground.write("inbox/new/" + name, #"{"id":"r\#(index)","type":"basketDelta","products":[\#(refusedLines)]}"#)
                refused.append(name)
            } else {
                var products: [String: Int] = [:]
                for id in ["s0", "s1", "s2", "s3"].shuffled(using: &rng).prefix(1 + rng.below(3)) { products[id] = 1 + rng.below(5) }
                let lines = products.map { #"{"id":"\#($0.key)","quantity":\#($0.value)}"# }.joined(separator: ",")
                try playground.write("inbox/new/" + name, #"{"id":"g\#(index)","type":"basketDelta","products":[\#(lines)]}"#)
                taken.append(("g\(index)", products))
            }
        }
        let context = "seed \(seed) (BASKET_SYNC_SEED=\(seed) replays it), \(count) events, refused \(refused)"
        #expect(try basketSync(["-C", dir, "sync"]).status == 0, "\(context)")
        let records = playground.records("outbox.jsonl")
        #expect(records.map { $0["source"] as? String ?? "" } == taken.map(\.id), "one record per event taken, in order: \(context)")
        #expect(records.map { ($0["seq"] as? Int) ?? 0 } == (0..<taken.count).map { $0 + 1 }, "\(context)")
        for (record, event) in zip(records, taken) { #expect(products(record) == event.products, "\(event.id)'s deltas: \(context)") }
        #expect(Set(playground.names("inbox/bad")) == Set(refused + refused.map { $0 + ".error" }), "\(context)")
        let status = try basketSync(["-C", dir, "status", "--json"])
        let object = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
        let pending = (object?["pending"] as? [[String: Any]] ?? []).map { ($0["seq"] as? Int) ?? 0 }
        #expect(pending == (0..<taken.count).map { $0 + 1 }, "every batch taken is pending: \(context)")
    }

    /// One Mealz event of many lines (40,000: far under maxFileBytes) left pending: `status`, its
    /// `--json` and `metrics` end as `sync` does, in time linear in the lines. Each line's pending
    /// units are summed once — `status` walked every pending batch for each line (quadratic: four
    /// minutes for this event, over an hour for 400,000 lines), a hang for the monitoring that
    /// calls it, caused by anyone who can deliver an event.
    @Test func aPendingBatchOfManyLinesIsReportedInTimeLinearInIt() throws {
        let playground = try syncDirectory()
        let lines = (0..<40_000).map { #"{"id":"S\#($0)","quantity":1}"# }.joined(separator: ",")
        try #"{"id":"big","type":"basketDelta","products":[\#(lines)]}"#.write(toFile: playground.path + "/inbox/new/big", atomically: false, encoding: .utf8)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        for command in [["status"], ["status", "--json"], ["metrics"]] {
            let process = Process()
            process.executableURL = binary
            process.arguments = ["-C", playground.path] + command
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            // A generous deadline (a second or two is what it takes): only a walk per line misses it.
            let deadline = ContinuousClock.now + .seconds(120)
            while process.isRunning, ContinuousClock.now < deadline { usleep(10_000) }
            let ended = !process.isRunning
            if !ended { process.terminate() }
            process.waitUntilExit()
            #expect(ended && process.terminationStatus == 0, "\(command) on a pending batch of 40,000 lines: \(ended ? "exit \(process.terminationStatus)" : "still running after 120 s")")
        }
    }

    /// U+2028 and U+2029 are written escaped: every line splitter sees one record per line.
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

    /// C1 controls (U+0085 splits lines for Python) are refused in ids like C0 and DEL.
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

    /// An error quotes at most 80 characters of the input, escaped.
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

    /// What is said of a cart's `syncedThrough` names the cart's file, as every cart error does:
    /// a claim beyond the outbox in `sync`'s error and in `status` (text and `--json`), a claim
    /// that went back in the warning.
    @Test func whatIsSaidOfACartsClaimNamesTheCart() throws {
        let playground = try syncDirectory()
        let cart = playground.path + "/cart.json"
        try playground.write("cart.json", cartJSON([("A", 1)], syncedThrough: 0))
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        try playground.write("cart.json", cartJSON([("A", 2)], syncedThrough: 1))
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        try playground.write("cart.json", cartJSON([("A", 2)], syncedThrough: 5))
        let beyond = try basketSync(["-C", playground.path, "sync"])
        #expect(beyond.stderr.contains("\(cart): the cart says syncedThrough 5 but the outbox ends at 1"), "\(beyond.stderr)")
        let status = try basketSync(["-C", playground.path, "status"])
        #expect(status.stdout.contains("\(cart): the cart says syncedThrough 5"), "\(status.stdout)")
        let json = try basketSync(["-C", playground.path, "status", "--json"])
        #expect(json.stdout.contains("\(cart): the cart says syncedThrough 5"), "\(json.stdout.prefix(2000))")
        try playground.write("cart.json", cartJSON([("A", 2)], syncedThrough: 0))
        let back = try basketSync(["-C", playground.path, "sync"])
        #expect(back.stderr.contains("\(cart): the cart says syncedThrough 0, below"), "\(back.stderr)")
    }

    /// Nothing in an event's file name reaches a log line or a `.error` file as it is when it
    /// could end the line, forge the next one or show it in another order: a newline, a line
    /// separator, a C1 control, a bidirectional override or isolate, a zero-width mark (Unicode's
    /// Cc, Cf, Zl and Zp) — each written as an escape.
    @Test(arguments: ["\n", "\u{2028}", "\u{85}", "\u{202E}", "\u{2067}", "\u{200B}", "\u{FEFF}", "\u{61C}"])
    func nothingInAFileNameCanForgeOrReorderALogLine(piece: String) throws {
        let playground = try syncDirectory()
        let name = "evil\(piece)basket-sync: error: forged"
        try "{not json".write(toFile: playground.path + "/inbox/new/" + name, atomically: false, encoding: .utf8)
        let sync = try basketSync(["-C", playground.path, "sync"])
        let status = try basketSync(["-C", playground.path, "status"])
        let errorFile = playground.names("inbox/bad").first { $0.hasSuffix(".error") } ?? "none"
        let shown = "evil\\u{\(String(piece.unicodeScalars.first!.value, radix: 16))}basket-sync: error: forged"
        for (what, text) in [("sync", sync.stderr), ("status", status.stdout), (".error", playground.read("inbox/bad/" + errorFile))] {
            let raw = text.unicodeScalars.filter { $0 != "\n" && $0.value >= 0x80 || ($0.value < 0x20 && $0 != "\n") }
                .filter { [.control, .format, .lineSeparator, .paragraphSeparator].contains($0.properties.generalCategory) }
            #expect(raw.isEmpty, "\(what) shows \(raw.map { String($0.value, radix: 16) }) raw: \(text)")
            #expect(text.contains(piece == "\n" ? "evil\\nbasket-sync: error: forged" : shown), "\(what): \(text)")
        }
    }

    /// A newline in an event's file name cannot forge a log line.
    @Test func aNewlineInAFileNameCannotForgeALogLine() throws {
        let playground = try syncDirectory()
        let name = "evil\nbasket-sync: error: forged"
        try "{not json".write(toFile: playground.path + "/inbox/new/" + name, atomically: false, encoding: .utf8)
        let sync = try basketSync(["-C", playground.path, "sync"])
        #expect(!sync.stderr.split(separator: "\n").contains { $0.hasPrefix("basket-sync: error: forged") }, "\(sync.stderr)")
        #expect(sync.stderr.contains("evil\\nbasket-sync: error: forged"))
        let status = try basketSync(["-C", playground.path, "status"])
        #expect(!status.stdout.split(separator: "\n").contains { $0.hasPrefix("basket-sync: error: forged") })
        // The .error file too: its first line is the error, escaped.
        let errorFile = playground.names("inbox/bad").first { $0.hasSuffix(".error") } ?? "none"
        let text = playground.read("inbox/bad/" + errorFile)
        #expect(text.split(separator: "\n").count == 2 && text.contains("evil\\nbasket-sync: error: forged"), "\(text)")
    }

    /// Ids are compared byte for byte end to end: a cart holding `café` in NFC
    /// (1) and in NFD (5), a delta `café`(NFD) +1, then `apply`: NFD becomes 6, NFC stays 1 (it
    /// became one line of 7). Then the cart settles the batch: Mealz's share is the NFD SKU's alone.
    @Test func canonicallyEquivalentIdsStayTwoSkus() throws {
        let playground = try syncDirectory()
        let (nfc, nfd) = ("caf\u{E9}", "cafe\u{301}")
        try playground.write("cart.json", cartJSON([(nfc, 1), (nfd, 5)]))
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "push", "--id", "d1", "\(nfd)=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let apply = try basketSync(["-C", playground.path, "apply"])
        #expect(apply.status == 0, "\(apply.stderr)")
        let cart = try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as? [String: Any]
        let lines = (cart?["products"] as? [[String: Any]] ?? []).map { (Array(($0["id"] as? String ?? "").utf8), $0["quantity"] as? Int ?? -1) }
        #expect(lines.count == 2, "two lines stay two lines: \(lines)")
        #expect(lines.first { $0.0 == Array(nfc.utf8) }?.1 == 1, "NFC untouched: \(lines)")
        #expect(lines.first { $0.0 == Array(nfd.utf8) }?.1 == 6, "NFD took the delta: \(lines)")
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let status = try JSONSerialization.jsonObject(with: Data(try basketSync(["-C", playground.path, "status", "--json"]).stdout.utf8)) as? [String: Any]
        let mealz = (status?["mealz"] as? [[String: Any]] ?? []).map { (Array(($0["id"] as? String ?? "").utf8), $0["share"] as? Int ?? -1, $0["host"] as? Int ?? -1) }
        #expect(mealz.count == 1 && mealz[0].0 == Array(nfd.utf8) && mealz[0].1 == 1 && mealz[0].2 == 6, "Mealz's share is 1 of the NFD SKU, the host holds 6: \(mealz)")
        let notified = playground.records("notifications.jsonl").last?["products"] as? [[String: Any]] ?? []
        #expect(notified.map { Array(($0["id"] as? String ?? "").utf8) } == [Array(nfd.utf8)], "only the NFD line is Mealz-related")
    }

    /// An argument that is not UTF-8 is refused (64), never turned into another id (U+FFFD).
    @Test func anArgumentThatIsNotUTF8IsRefused() throws {
        let playground = try syncDirectory()
        let run = try basketSync(["-c", #"exec "$0" -C "$1" push --id "$(printf 'e\377')" "$(printf 'a\377b=+1')""#, binary.path, playground.path], executable: "/bin/sh")
        #expect(run.status == 64, "\(run.stderr)")
        #expect(run.stderr.contains("is not valid UTF-8"), "\(run.stderr)")
        #expect(playground.names("inbox/new").isEmpty, "nothing delivered")
    }

    /// A database restored from an older backup: every command that writes finds it behind the
    /// files (74) before writing — `set-store` and the payment commands too — and `status` says so.
    /// After the records, the file may end with a line that is not one (a blank, a host's own
    /// line, a torn record): none of them hides the database being behind, and nothing is cut.
    @Test(arguments: ["", "\n", "{\"host\":\"note\"}\n", "{\"seq\":3,\"id\":\"torn"])
    func aDatabaseBehindTheFilesStopsEveryWriterAndStatusSaysSo(trailing: String) throws {
        let playground = try syncDirectory()
        let dir = playground.path
        #expect(try basketSync(["-C", dir, "push", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        let backup = try Data(contentsOf: playground.url(".basket-sync/state.db"))
        #expect(try basketSync(["-C", dir, "push", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        try backup.write(to: playground.url(".basket-sync/state.db"))
        let outbox = try FileHandle(forWritingTo: playground.url("outbox.jsonl"))
        outbox.seekToEndOfFile()
        outbox.write(Data(trailing.utf8))
        try outbox.close()
        let before = playground.read("outbox.jsonl")
        for command in [["set-store", "s1"], ["payment-started", "--total", "1.00"], ["handle-payment", "--total", "1.00", "--order-id", "o1"], ["sync"], ["apply"]] {
            let run = try basketSync(["-C", dir] + command)
            #expect(run.status == 74, "\(command): \(run.status) \(run.stderr)")
            #expect(run.stderr.contains("outbox.jsonl: holds record 2 but the database ends at 1"), "\(command): \(run.stderr)")
        }
        #expect(playground.records("payments.jsonl").isEmpty, "nothing written")
        #expect(playground.read("outbox.jsonl") == before, "nothing cut or appended")
        let status = try basketSync(["-C", dir, "status"])
        #expect(status.status == 0)
        #expect(status.stdout.contains("database behind the files: \(dir)/outbox.jsonl holds record 2 but the database ends at 1"), "\(status.stdout)")
        #expect(status.stdout.contains("last error: the database is behind the files (above): still current"), "\(status.stdout)")
        // The agent stops (74) instead of retrying for ever.
        let agent = try basketSync(["-C", dir, "watch"], killAfter: 20)
        #expect(agent?.status == 74, "\(agent?.stderr ?? "hung")")
    }

    /// A line that only looks like a record (`{"seq":1}`, a number with junk after it) is not
    /// one of ours: in a sound directory nothing is appended twice and nothing is refused; after a
    /// restore it does not hide the database being behind.
    @Test(arguments: [#"{"seq":1}"#, #"{"seq":1 x"#, #"{"seq":1e99}"#, #"{"seq":01}"#, #"{"seq":99 garbage"#, #"{"seq":3,"type":"x""#])
    func aLineThatOnlyLooksLikeARecordIsNotOurs(forged: String) throws {
        let playground = try syncDirectory()
        let dir = playground.path
        func round(_ id: String) throws {
            #expect(try basketSync(["-C", dir, "push", "--id", id, "A=+1"]).status == 0)
            let sync = try basketSync(["-C", dir, "sync"])
            #expect(sync.status == 0, "\(forged): \(sync.stderr)")
        }
        try round("e1")
        let outbox = try FileHandle(forWritingTo: playground.url("outbox.jsonl"))
        outbox.seekToEndOfFile()
        outbox.write(Data((forged + "\n").utf8))
        try outbox.close()
        try round("e2")
        try round("e3")
        let seqs = playground.records("outbox.jsonl").compactMap { $0["source"] as? String }
        #expect(seqs == ["e1", "e2", "e3"], "\(forged): each record once: \(playground.read("outbox.jsonl"))")

        // The same line after a restore hides nothing.
        let backup = try Data(contentsOf: playground.url(".basket-sync/state.db"))
        try round("e4")
        try backup.write(to: playground.url(".basket-sync/state.db"))
        let tail = try FileHandle(forWritingTo: playground.url("outbox.jsonl"))
        tail.seekToEndOfFile()
        tail.write(Data((forged + "\n").utf8))
        try tail.close()
        let sync = try basketSync(["-C", dir, "sync"])
        #expect(sync.status == 74, "\(forged): \(sync.stderr)")
        #expect(sync.stderr.contains("outbox.jsonl: holds record 4 but the database ends at 3"), "\(forged): \(sync.stderr)")
    }

    /// A very long foreign line after the records (8 MiB, no newline inside) is stepped over, each
    /// byte read once (it took seconds per command, growing with the square of its length).
    @Test func aVeryLongForeignLineIsSteppedOver() throws {
        let playground = try syncDirectory()
        let dir = playground.path
        #expect(try basketSync(["-C", dir, "push", "--id", "e1", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        let outbox = try FileHandle(forWritingTo: playground.url("outbox.jsonl"))
        outbox.seekToEndOfFile()
        outbox.write(Data(repeating: UInt8(ascii: "x"), count: 8 << 20) + Data("\n".utf8))
        try outbox.close()
        #expect(try basketSync(["-C", dir, "push", "--id", "e2", "A=+1"]).status == 0)
        let sync = try basketSync(["-C", dir, "sync"])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(playground.records("outbox.jsonl").compactMap { $0["source"] as? String } == ["e1", "e2"])
    }

    /// Only notifications.jsonl ahead of a restored database: `apply` (which writes the cart, not
    /// that file) stops too, before touching the cart or any file.
    @Test func applyStopsWhenAnyFileIsAheadOfTheDatabase() throws {
        let playground = try syncDirectory()
        let dir = playground.path
        #expect(try basketSync(["-C", dir, "push", "A=+1"]).status == 0)
        try playground.write("cart.json", cartJSON([("A", 1)], syncedThrough: 1))
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        let backup = try Data(contentsOf: playground.url(".basket-sync/state.db"))
        try playground.write("cart.json", cartJSON([("A", 2)], syncedThrough: 1))
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        try backup.write(to: playground.url(".basket-sync/state.db"))
        let files = ["cart.json", "outbox.jsonl", "notifications.jsonl", "payments.jsonl"].map { playground.read($0) }
        let apply = try basketSync(["-C", dir, "apply"])
        #expect(apply.status == 74, "\(apply.stderr)")
        #expect(apply.stderr.contains("notifications.jsonl: holds record 2 but the database ends at 1"), "\(apply.stderr)")
        #expect(["cart.json", "outbox.jsonl", "notifications.jsonl", "payments.jsonl"].map { playground.read($0) } == files, "nothing changed")
    }

    /// An exact copy of one of our own lines appended at the end (by a host or a careless copy) is
    /// not where the file got to: nothing is appended twice; after a restore it does not hide the
    /// database being behind.
    @Test(arguments: [0, 1, 2])
    func aCopyOfOneOfOurLinesAtTheEndIsNotWhereTheFileGotTo(copied: Int) throws {
        let playground = try syncDirectory()
        let dir = playground.path
        for id in ["e1", "e2", "e3"] { #expect(try basketSync(["-C", dir, "push", "--id", id, "A=+1"]).status == 0) }
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        func appendCopy() throws {
            let lines = playground.read("outbox.jsonl").split(separator: "\n")
            let outbox = try FileHandle(forWritingTo: playground.url("outbox.jsonl"))
            outbox.seekToEndOfFile()
            outbox.write(Data((lines[copied] + "\n").utf8))
            try outbox.close()
        }
        try appendCopy()
        #expect(try basketSync(["-C", dir, "push", "--id", "e4", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        let sources = playground.records("outbox.jsonl").compactMap { $0["source"] as? String }
        #expect(sources.filter { $0 != ["e1", "e2", "e3"][copied] } == ["e1", "e2", "e3", "e4"].filter { $0 != ["e1", "e2", "e3"][copied] }, "\(sources)")
        #expect(sources.last == "e4" && sources.filter { $0 == "e4" }.count == 1, "\(sources)")

        let backup = try Data(contentsOf: playground.url(".basket-sync/state.db"))
        #expect(try basketSync(["-C", dir, "push", "--id", "e5", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        try backup.write(to: playground.url(".basket-sync/state.db"))
        try appendCopy()
        let sync = try basketSync(["-C", dir, "sync"])
        #expect(sync.status == 74, "\(sync.stderr)")
        #expect(try basketSync(["-C", dir, "status"]).stdout.contains("database behind the files"))
    }

    /// The sync directory given as a link (`-C link`, an operator's choice) works like the real one.
    @Test func aSyncDirectoryGivenThroughALinkWorks() throws {
        let playground = try syncDirectory()
        let link = playground.path + "-link"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: playground.path)
        defer { try? FileManager.default.removeItem(atPath: link) }
        #expect(try basketSync(["-C", link, "push", "A=+1"]).status == 0)
        let sync = try basketSync(["-C", link, "sync"])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(try basketSync(["-C", link + "/", "status"]).status == 0)
        #expect(playground.records("outbox.jsonl").count == 1)
    }

    /// A result that cannot be written (stdout on a full disk) fails the command (74), never 0.
    @Test func aResultThatCannotBeWrittenFailsTheCommand() throws {
        let playground = try syncDirectory()
        let full = try #require(FileHandle(forWritingAtPath: "/dev/full"))
        let errors = playground.path + "/errors.txt"
        _ = FileManager.default.createFile(atPath: errors, contents: nil)
        let child = Child()
        child.executableURL = binary
        child.arguments = ["-C", playground.path, "status", "--json"]
        child.standardOutput = full
        child.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errors))
        try child.run()
        child.waitUntilExit()
        #expect(child.terminationStatus == 74)
        #expect(playground.read("errors.txt").contains("standard output: write failed: No space left on device; the command was carried out, only its output was lost"), "\(playground.read("errors.txt"))")
    }

    /// The error that stops the agent is a line of its log, in the log's format (JSON when asked).
    @Test func theAgentsFatalErrorIsALogLineInItsFormat() throws {
        let playground = try Playground()
        let run = try basketSync(["-C", playground.path + "/nowhere", "watch", "--log-format", "json"])
        #expect(run.status == 66)
        let lines = run.stderr.split(separator: "\n")
        #expect(lines.count == 1, "\(run.stderr)")
        let line = try JSONSerialization.jsonObject(with: Data((lines.first ?? "").utf8)) as? [String: Any]
        #expect(line?["level"] as? String == "error", "\(run.stderr)")
        #expect((line?["message"] as? String)?.contains("nowhere: no such directory") == true, "\(run.stderr)")
    }

    /// Quantities at the largest limit (2^53 − 1) go through every command, `status` included:
    /// no trap; a larger limit is refused by name (78).
    @Test func hugeQuantitiesNeverCrashStatus() throws {
        let playground = try syncDirectory()
        try playground.write("basket-sync.json", #"{"limits": {"maxQuantity": 9223372036854775807}}"#)
        let refused = try basketSync(["-C", playground.path, "status"])
        #expect(refused.status == 78 && refused.stderr.contains("\"limits.maxQuantity\" must be at most 9007199254740991"), "\(refused)")
        try playground.write("basket-sync.json", #"{"limits": {"maxQuantity": 9007199254740991}}"#)
        for (id, delta) in [("b1", "+9007199254740991"), ("b2", "+9007199254740991"), ("b3", "-9007199254740991")] {
            #expect(try basketSync(["-C", playground.path, "push", "--id", id, "b=\(delta)"]).status == 0)
        }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        for arguments in [["status"], ["status", "--json"]] {
            let status = try basketSync(["-C", playground.path] + arguments)
            #expect(status.status == 0, "\(arguments): \(status.status) \(status.stderr)")
        }
        let json = try basketSync(["-C", playground.path, "status", "--json"]).stdout
        #expect((try? JSONSerialization.jsonObject(with: Data(json.utf8))) != nil && !json.contains("9223372036854775807"), "\(json)")
    }

    /// `push`, `set-store` and the payment commands check ids as the agent does (64).
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

/// The JSON Lines files are caught up by `seq`, never by line count (docs/spec.md §3): whatever
/// someone else does to a file, no record is ever appended twice, and none is lost from the file
/// that a reader could not have had.
@Suite struct CatchUpTests {
    func seqs(_ playground: Playground, _ file: String = "outbox.jsonl") -> [Int] {
        playground.read(file).split(separator: "\n").compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["seq"] as? Int
        }
    }

    @discardableResult
    func push(_ playground: Playground, _ id: String) throws -> Run {
        #expect(try basketSync(["-C", playground.path, "push", "--id", id, "A=+1"]).status == 0)
        let sync = try basketSync(["-C", playground.path, "sync"])
        #expect(sync.status == 0 || sync.status == 65, "\(sync.stderr)")
        return sync
    }

    enum Interference: String, CaseIterable {
        case foreignLine = "a foreign line appended"
        case blankLine = "a blank line appended"
        case copiedRecord = "its last record appended again (a copy)"
        case movedAway = "moved away (logrotate)"
        case truncated = "truncated (copytruncate)"
        case editedShorter = "its last record written over in place by a shorter line"
        case deleted = "deleted"

        func apply(to path: String) throws {
            switch self {
            case .foreignLine: try appendText("{\"note\":\"the host's own line\"}\n", to: path)
            case .blankLine: try appendText("\n", to: path)
            case .copiedRecord:
                let text = try String(contentsOfFile: path, encoding: .utf8)
                try appendText(String(text.split(separator: "\n").last!) + "\n", to: path)
            case .movedAway: try FileManager.default.moveItem(atPath: path, toPath: path + ".1")
            case .truncated: _ = truncate(path, 0)
            case .editedShorter:
                // The same file (inode), rewritten from the start: record 2 made a host's note.
                var lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map(String.init)
                lines[lines.count - 1] = "{\"note\":\"edited\"}"
                let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
                try handle.truncate(atOffset: 0)
                try handle.write(contentsOf: Data((lines.joined(separator: "\n") + "\n").utf8))
                try handle.close()
            case .deleted: try FileManager.default.removeItem(atPath: path)
            }
        }

        func appendText(_ text: String, to path: String) throws {
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data(text.utf8))
            try handle.close()
        }
    }

    @Test(arguments: Interference.allCases)
    func noRecordIsAppendedTwiceWhateverIsDoneToTheFile(interference: Interference) throws {
        let playground = try Playground()
        _ = try basketSync(["-C", playground.path, "init"])
        try push(playground, "e1")
        try push(playground, "e2")
        #expect(seqs(playground) == [1, 2])
        try interference.apply(to: playground.path + "/outbox.jsonl")
        let third = try push(playground, "e3")
        let foreign = [.foreignLine, .blankLine, .editedShorter].contains(interference)
        let expected: [Int] = interference == .editedShorter ? [1, 3] : foreign ? [1, 2, 3] : interference == .copiedRecord ? [1, 2, 2, 3] : [3]
        // Shorter but still holding records: an edit, not a rotator's cut; deleted, the file made
        // again is a new one even with the inode number of the one deleted.
        #expect(third.stderr.contains("copytruncate") == (interference == .truncated), "\(interference.rawValue): \(third.stderr)")
        #expect(seqs(playground) == expected, "\(interference.rawValue): \(playground.read("outbox.jsonl"))")
        if interference == .foreignLine { #expect(playground.read("outbox.jsonl").contains("the host's own line"), "left alone") }
        // Lines that are not records — or a copy of one — are left alone and said (as what they are), once.
        let said = interference == .copiedRecord ? "outbox.jsonl: its last line is record 2 again" : "outbox.jsonl: its last line is not a record of basket-sync"
        #expect(third.stderr.contains(said) == (foreign || interference == .copiedRecord), "\(interference.rawValue): \(third.stderr)")
        #expect(!(interference == .copiedRecord && third.stderr.contains("is not a record")), "a copy of a record is named as one: \(third.stderr)")
        let fourth = try push(playground, "e4")
        #expect(seqs(playground) == expected + [4])
        #expect(!fourth.stderr.contains(said), "\(interference.rawValue): said again: \(fourth.stderr)")
    }

    /// The agent checks, before it appends after the record it appended last, that the file still
    /// ends with it byte for byte: the same file and the same size cannot tell a line of the same
    /// length written over it in place — a foreign line, or the record with another quantity.
    @Test(arguments: ["foreign", "record"])
    func aRecordWrittenOverInPlaceByALineOfItsLengthIsSaid(forgery: String) async throws {
        let playground = try Playground()
        _ = try basketSync(["-C", playground.path, "init"])
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        for index in 1...3 {
            _ = try basketSync(["-C", playground.path, "push", "--id", "e\(index)", "A=+\(index)"])
            try await eventually("record \(index) is appended") { seqs(playground).count == index }
        }
        let path = playground.path + "/outbox.jsonl"
        let text = playground.read("outbox.jsonl")
        let last = text.split(separator: "\n").last!
        let forged = forgery == "record" ? last.replacingOccurrences(of: "\"quantity\":3", with: "\"quantity\":9")
            : "{\"note\":\"" + String(repeating: "x", count: last.utf8.count - 11) + "\"}"
        #expect(forged.utf8.count == last.utf8.count && forged != last, "\(forged)")
        let handle = try #require(FileHandle(forWritingAtPath: path))
        try handle.seek(toOffset: UInt64(text.utf8.count - last.utf8.count - 1))
        try handle.write(contentsOf: Data(forged.utf8))
        try handle.close()
        _ = try basketSync(["-C", playground.path, "push", "--id", "e4", "A=+4"])
        try await eventually("record 4 is appended") { seqs(playground).last == 4 }
        // The warning is logged once the catch-up that appended record 4 returns: waited for.
        try await eventually("the forged line is said") { agent.log.contains("outbox.jsonl: its last line is not a record of basket-sync") }
        #expect(playground.read("outbox.jsonl").contains(forged), "left alone")
        #expect(agent.stop() == 0)
    }

    /// A database that lost commits the files hold (restored from an older backup, its WAL
    /// deleted) is detected before anything is written: the files hold records it does not.
    @Test func aLostDatabaseIsDetectedNotPaperedOver() throws {
        let playground = try Playground()
        _ = try basketSync(["-C", playground.path, "init"])
        try push(playground, "e1")
        let backup = playground.path + "/backup"
        try FileManager.default.copyItem(atPath: playground.path + "/.basket-sync", toPath: backup)
        try push(playground, "e2")
        let before = playground.read("outbox.jsonl")
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
        try FileManager.default.moveItem(atPath: backup, toPath: playground.path + "/.basket-sync")
        _ = try basketSync(["-C", playground.path, "push", "--id", "e3", "A=+1"])
        let sync = try basketSync(["-C", playground.path, "sync"])
        #expect(sync.status == 74, "\(sync.stderr)")
        #expect(sync.stderr.contains("holds record 2 but the database ends at 1"))
        #expect(playground.read("outbox.jsonl") == before, "nothing written")
        #expect(playground.names("inbox/new").count == 1, "nothing acknowledged")
        // init there says so (74) with the ways out, not "nothing to create" and 0.
        for arguments in [["init"], ["init", "--adopt"]] {
            let again = try basketSync(["-C", playground.path] + arguments)
            #expect(again.status == 74 && again.stderr.contains("move .basket-sync/ away and run basket-sync init --adopt"), "\(arguments): \(again.status) \(again.stderr)")
        }
    }

    /// A file at an output's name that holds lines but no record of basket-sync (another
    /// program's, a forged one): `init` and `init --adopt` refuse (73) before making a database
    /// for it, as every command would refuse to append to it; moved away, init makes the directory.
    @Test(arguments: ["outbox.jsonl", "notifications.jsonl", "payments.jsonl"])
    func initRefusesAnOutputFileThatHoldsNoRecordOfBasketSync(file: String) throws {
        let playground = try Playground()
        try playground.write(file, "{\"seq\":1,\"id\":\"someone-else\",\"note\":\"not a record\"}\n")
        for command in [["init"], ["init", "--adopt"]] {
            let run = try basketSync(["-C", playground.path] + command)
            #expect(run.status == 73 && run.stderr.contains("\(file): holds lines but no record of basket-sync") && run.stderr.contains("Move it away"), "\(command): \(run.status) \(run.stderr)")
            #expect(!FileManager.default.fileExists(atPath: playground.path + "/.basket-sync/state.db"), "\(command) made a database")
        }
        try FileManager.default.moveItem(atPath: playground.path + "/" + file, toPath: playground.path + "/" + file + ".someone")
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        try playground.write("cart.json", cartJSON([], syncedThrough: 0))
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
    }


    /// `init` in a directory that holds records but no database refuses (73); `--adopt` goes
    /// on after the files' last records, and a recorded order is still answered as recorded.
    @Test func initRefusesToNumberAgainAndAdoptGoesOn() throws {
        let playground = try Playground()
        let dir = playground.path
        _ = try basketSync(["-C", dir, "init"])
        _ = try basketSync(["-C", dir, "set-store", "S", "--mode", "retailer"])
        try push(playground, "e1")
        try push(playground, "e2")
        // A (Mealz's) and X (the shopper's): the payment is recorded and closes basket 1.
        try playground.write("cart.json", cartJSON([("A", 2), ("X", 1)]))
        let ran = dir + "/../completion-\(UUID().uuidString)"
        #expect(try basketSync(["-C", dir, "handle-payment", "--total", "1.00", "--order-id", "o-1", "--then", "/bin/sh", "-c", "echo ran >> \(ran)"]).status == 0)
        defer { unlink(ran) }
        try FileManager.default.removeItem(atPath: dir + "/.basket-sync")
        // The advice a command gives is the one that works: init --adopt, not plain init.
        let lost = try basketSync(["-C", dir, "sync"])
        #expect(lost.status == 66 && lost.stderr.contains("the database is gone") && lost.stderr.contains("init --adopt"), "\(lost.stderr)")

        let refused = try basketSync(["-C", dir, "init"])
        #expect(refused.status == 73, "\(refused.stderr)")
        #expect(refused.stderr.contains("outbox.jsonl up to 2"))
        #expect(!FileManager.default.fileExists(atPath: dir + "/.basket-sync/state.db"))

        let adopted = try basketSync(["-C", dir, "init", "--adopt"])
        #expect(adopted.status == 0, "\(adopted.stderr)")
        #expect(adopted.stdout.contains("outbox.jsonl: adopted 2 records, going on after 2"))
        try push(playground, "e3")
        #expect(seqs(playground) == [1, 2, 3])
        #expect(adopted.stdout.contains("the last recorded payment was in store \"S\""), "\(adopted.stdout)")
        #expect(adopted.stdout.split(separator: "\n").allSatisfy { $0.hasPrefix("created ") }, "\(adopted.stdout)")
        _ = try basketSync(["-C", dir, "set-store", "S", "--mode", "retailer"])
        // A completion that ran is not run again after the
        // adoption, and the Mealz basket goes on after the one the payment closed.
        let retry = try basketSync(["-C", dir, "handle-payment", "--total", "1.00", "--order-id", "o-1", "--then", "/bin/sh", "-c", "echo again >> \(ran)"])
        #expect(retry.stdout.contains("already recorded"), "\(retry.stdout) \(retry.stderr)")
        #expect(seqs(playground, "payments.jsonl") == [1])
        #expect((try? String(contentsOfFile: ran, encoding: .utf8)) == "ran\n", "the completion ran once")
        #expect(try basketSync(["-C", dir, "status"]).stdout.contains("Mealz basket 2"))
    }
}

extension HostileInputTests {
    /// An inbox entry whose name is not UTF-8 (no Swift string can name it) is not left in new/
    /// silently for ever, where one could fill the disk with them: it goes to bad/ under a name of
    /// its own, with a .error, and is reported; the events around it are taken.
    @Test(arguments: ["ev\\xff1", "\\xed\\xa0\\x80x", "\\xc3"])
    func anEntryNamedInBytesThatAreNotUTF8IsSetAsideAndReported(name: String) throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let script = """
            import os, sys
            d = sys.argv[1].encode()
            for name, id in [(b"a-first", "e1"), (b"\(name)", "e2"), (b"z-last", "e3")]:
                open(d + b"/inbox/tmp/t", "w").write('{"id":"%s","type":"basketDelta","products":[{"id":"A","quantity":1}]}' % id)
                os.rename(d + b"/inbox/tmp/t", d + b"/inbox/new/" + name)
            """
        let python = Child()
        python.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        python.arguments = ["python3", "-c", script, playground.path]
        try python.run()
        python.waitUntilExit()
        #expect(python.terminationStatus == 0)
        let sync = try basketSync(["-C", playground.path, "sync"])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(sync.stderr.contains("the name is not UTF-8"), "\(sync.stderr)")
        #expect(sync.stdout.contains("2 taken") && sync.stdout.contains("1 bad"), "\(sync.stdout)")
        #expect(playground.names("inbox/new").isEmpty, "\(playground.names("inbox/new"))")
        let bad = playground.names("inbox/bad")
        #expect(bad.count == 2 && bad.contains { $0.hasPrefix("renamed.") && $0.hasSuffix(".error") }, "\(bad)")
        let status = try basketSync(["-C", playground.path, "status", "--json"])
        #expect(status.stdout.contains("not UTF-8"), "the error is kept for status: \(status.stdout)")
    }
}

extension HostileInputTests {
    /// A Maildir name used again never replaces the file `cur/` filed under it, and a directory of
    /// that name in `cur/` never keeps the entry in `new/` for ever, filed again at every pass: the
    /// entry goes to `cur/` under a name of its own.
    @Test func aNameCurHoldsAlreadyIsNotReplaced() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        func deliver(_ name: String, id: String) throws {
            try playground.write("inbox/tmp/\(name)", "{\"id\": \"\(id)\", \"type\": \"basketDelta\", \"products\": [{\"id\": \"A\", \"quantity\": 1}]}")
            try FileManager.default.moveItem(atPath: playground.path + "/inbox/tmp/\(name)", toPath: playground.path + "/inbox/new/\(name)")
        }
        try deliver("ev1", id: "first")
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        try deliver("ev1", id: "second")
        try FileManager.default.createDirectory(atPath: playground.path + "/inbox/cur/evX", withIntermediateDirectories: false)
        try deliver("evX", id: "third")
        let sync = try basketSync(["-C", playground.path, "sync"])
        #expect(sync.status == 0 && sync.stdout.contains("2 taken"), "\(sync.stdout) \(sync.stderr)")
        #expect(playground.names("inbox/new").isEmpty, "\(playground.names("inbox/new"))")
        let cur = playground.names("inbox/cur")
        let contents = cur.map { playground.read("inbox/cur/" + $0) }
        #expect(contents.filter { $0.contains("\"first\"") }.count == 1 && contents.filter { $0.contains("\"second\"") }.count == 1, "both archived: \(cur)")
        #expect(cur.contains { $0.hasPrefix("evX.again.") }, "\(cur)")
        #expect(playground.records("outbox.jsonl").compactMap { $0["source"] as? String } == ["first", "second", "third"])
        let again = try basketSync(["-C", playground.path, "sync"])
        #expect(!again.stderr.contains("acknowledged again"), "\(again.stderr)")
    }
}

extension HostileInputTests {
    /// A group of waiting events also ends once they reach `maxFileBytes` together (their decoded
    /// events are held until the commit): with a small limit, many groups, every event once, in order.
    @Test func groupsEndAtTheByteLimitAndKeepTheOrder() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.write("basket-sync.json", "{\"limits\": {\"maxFileBytes\": 400}}")
        for index in 0..<30 {
            let name = String(format: "%03d", index)
            try playground.write("inbox/tmp/\(name)", "{\"id\": \"e\(index)\", \"type\": \"basketDelta\", \"products\": [{\"id\": \"A\", \"quantity\": 1}]}")
            try FileManager.default.moveItem(atPath: playground.path + "/inbox/tmp/\(name)", toPath: playground.path + "/inbox/new/\(name)")
        }
        let sync = try basketSync(["-C", playground.path, "sync"])
        #expect(sync.status == 0 && sync.stdout.contains("30 taken"), "\(sync.stdout) \(sync.stderr)")
        #expect(playground.records("outbox.jsonl").compactMap { $0["source"] as? String } == (0..<30).map { "e\($0)" })
        #expect(playground.names("inbox/new").isEmpty)
    }
}

extension CatchUpTests {
    /// After `init --adopt`, an event taken before and delivered again is not taken again (the
    /// host would get its delta twice). The adopted database knows the ids
    /// of the outbox's records (`source`), of the events in `inbox/cur/` (an event ignored with no
    /// synchronizer made no record) and the transfers that landed; in a single directory and in
    /// a tree's cart.
    @Test(arguments: [false, true])
    func eventsTakenBeforeAreNotTakenAgainAfterAdoption(tree: Bool) throws {
        let root = try Playground()
        let dir = tree ? root.path + "/c1" : root.path
        #expect(try basketSync(["-C", root.path, "init"] + (tree ? ["--tree"] : [])).status == 0)
        func deliver(_ arguments: [String], noSynchronizer: Bool = false) throws {
            #expect(try basketSync(["-C", dir, "push"] + arguments).status == 0)
            #expect(try basketSync(["-C", dir, "sync"] + (noSynchronizer ? ["--no-synchronizer"] : [])).status == 0)
        }
        func outbox() -> [[String: Any]] {
            ((try? String(contentsOfFile: dir + "/outbox.jsonl", encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
        }
        try deliver(["--id", "evt-1", "a=+1"])
        try deliver(["--id", "evt-ignored", "b=+1"], noSynchronizer: true)
        try deliver(["--id", "evt-t", "--transfer", "t-1", "c=2"])
        // A canonically equivalent id is another id: taken before the loss, and not merged after.
        try deliver(["--id", "caf\u{E9}", "d=+1"])
        #expect(outbox().count == 3)
        try FileManager.default.removeItem(atPath: (tree ? root.path : dir) + "/.basket-sync")
        // A tree's whole database gone: init --tree --adopt adopts the cart as init --adopt would.
        let adopted = try basketSync(tree ? ["-C", root.path, "init", "--tree", "--adopt"] : ["-C", dir, "init", "--adopt"])
        #expect(adopted.status == 0, "\(adopted.stderr)")
        // Each delivered again (new files), and the transfer under a new event id.
        try deliver(["--id", "evt-1", "a=+1"])
        try deliver(["--id", "evt-ignored", "b=+1"])
        try deliver(["--id", "evt-t2", "--transfer", "t-1", "c=2"])
        try deliver(["--id", "cafe\u{301}", "d=+1"])
        let records = outbox()
        #expect(records.compactMap { $0["source"] as? String } == ["evt-1", "evt-t", "caf\u{E9}", "cafe\u{301}"], "\(records)")
        #expect(records.compactMap { $0["seq"] as? Int } == [1, 2, 3, 4])
        let status = try basketSync(["-C", dir, "status", "--json"])
        let inbox = (try? JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])?["inbox"] as? [String: Any]
        #expect(inbox?["duplicates"] as? Int == 2, "evt-1 and evt-ignored acknowledged, not done again: \(status.stdout)")
        let counters = (try? JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])?["counters"] as? [String: Any]
        #expect(counters?["duplicateTransfers"] as? Int == 1, "t-1 landed before the loss: \(status.stdout)")
    }
}

extension CatchUpTests {
    /// Records rotated away (`outbox.jsonl.1`…) are
    /// records: a lost database is said, `init` refuses and `--adopt` goes on after them; and a
    /// new database — a single directory's or a tree's new cart — knows the events `cur/` holds.
    @Test func rotatedRecordsAndTakenEventsSurviveALostDatabase() throws {
        let playground = try Playground()
        let dir = playground.path
        #expect(try basketSync(["-C", dir, "init"]).status == 0)
        try playground.writeAtomically("basket-sync.json", playground.read("basket-sync.json").replacingOccurrences(of: "\"rotate\": null", with: "\"rotate\": {\"maxBytes\": 100, \"keep\": 3}"))
        for index in 1...4 { try push(playground, "r\(index)") }
        #expect(!FileManager.default.fileExists(atPath: dir + "/outbox.jsonl") || seqs(playground).isEmpty, "every record rotated away")
        try FileManager.default.removeItem(atPath: dir + "/.basket-sync")
        let lost = try basketSync(["-C", dir, "status"])
        #expect(lost.status == 66 && lost.stderr.contains("the database is gone"), "\(lost.stderr)")
        #expect(try basketSync(["-C", dir, "init"]).status == 73)
        let adopted = try basketSync(["-C", dir, "init", "--adopt"])
        #expect(adopted.stdout.contains("going on after 4"), "\(adopted.stdout) \(adopted.stderr)")
        try push(playground, "r9")
        try push(playground, "r4")
        let all = (["outbox.jsonl"] + (1...3).map { "outbox.jsonl.\($0)" }).flatMap { name in
            playground.read(name).split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        }
        let sources = all.compactMap { record in (record["seq"] as? Int).map { "\($0):\(record["source"] ?? "?")" } }
        #expect(sources.contains("5:r9") && sources.filter { $0.hasSuffix(":r4") } == ["4:r4"], "seq goes on, r4 not done again: \(sources)")
    }
}

extension TreeTests {
    /// A tree's cart adopted by a new database (its records moved
    /// away by the host, so nothing to adopt) knows the events its `cur/` holds as taken.
    @Test func aNewDatabaseKnowsTheEventsACartTookBefore() throws {
        let playground = try tree()
        #expect(try basketSync(["-C", playground.path + "/c1", "push", "--id", "e1", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        for name in ["outbox.jsonl", "notifications.jsonl"] where FileManager.default.fileExists(atPath: playground.path + "/c1/" + name) {
            try FileManager.default.moveItem(atPath: playground.path + "/c1/" + name, toPath: playground.path + "/c1/" + name + ".old")
        }
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
        #expect(try basketSync(["-C", playground.path, "init", "--tree"]).status == 0, "no records left to number again")
        #expect(try basketSync(["-C", playground.path + "/c1", "push", "--id", "e1", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect(playground.records("c1/outbox.jsonl").isEmpty, "e1 delivered again is not done again")
    }
}

extension CatchUpTests {
    /// After `init --adopt`, Mealz's lines come back from the last notification: forgotten, the
    /// next notification would tell Mealz they were gone and a basketState repeating the WebView's
    /// basket would push them again (the cart doubled).
    @Test func adoptionKnowsWhatTheLastNotificationShowed() throws {
        let playground = try Playground()
        let dir = playground.path
        #expect(try basketSync(["-C", dir, "init"]).status == 0)
        try playground.write("cart.json", cartJSON([("x", 1)], syncedThrough: 0))
        #expect(try basketSync(["-C", dir, "push", "--id", "d1", "a=+2", "b=+1"]).status == 0)
        for command in [["sync"], ["apply"], ["sync"]] { #expect(try basketSync(["-C", dir] + command).status == 0) }
        let notified = playground.records("notifications.jsonl").count
        try FileManager.default.removeItem(atPath: dir + "/.basket-sync")
        #expect(try basketSync(["-C", dir, "init", "--adopt"]).status == 0)
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        #expect(playground.records("notifications.jsonl").count == notified, "the cart is what was notified: nothing new to say")
        #expect(try basketSync(["-C", dir, "push", "--state", "--id", "s2", "a=2", "b=1"]).status == 0)
        for command in [["sync"], ["apply"]] { #expect(try basketSync(["-C", dir] + command).status == 0) }
        let lines = products(try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as? [String: Any] ?? [:])
        #expect(lines == ["x": 1, "a": 2, "b": 1], "the WebView's basket repeated changes nothing: \(lines)")
    }

    /// Records moved away (an archived outbox, or a tree cart's files moved off with its marker)
    /// and the database lost: a new database numbers its records after what the host claims (its
    /// cart, the last notification), so the cart's old syncedThrough never acknowledges a new
    /// record unapplied, as it would if seq restarted at 1.
    @Test(arguments: [false, true])
    func aNewDatabaseNumbersAfterWhatTheHostClaims(tree: Bool) throws {
        let playground = try Playground()
        let root = playground.path
        let dir = tree ? root + "/c2" : root
        #expect(try basketSync(["-C", root, "init"] + (tree ? ["--tree"] : [])).status == 0)
        if tree { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false) }
        try playground.write((tree ? "c2/" : "") + "cart.json", cartJSON([], syncedThrough: 0))
        #expect(try basketSync(["-C", dir, "push", "--id", "e1", "a=+1"]).status == 0)
        #expect(try basketSync(["-C", dir, "push", "--id", "e2", "b=+1"]).status == 0)
        for command in [["sync"], ["apply"], ["sync"]] { #expect(try basketSync(["-C", command == ["apply"] ? dir : root] + command).status == 0) }
        let archive = root + "/../archive-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: archive, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: archive) }
        if tree {
            // The tool's own advice for a refused cart: move its .jsonl files away (its marker lost too).
            for name in ["outbox.jsonl", "notifications.jsonl", ".basket-sync-cart"] { try? FileManager.default.moveItem(atPath: dir + "/" + name, toPath: archive + "/" + name) }
        } else {
            try FileManager.default.moveItem(atPath: dir + "/outbox.jsonl", toPath: archive + "/outbox.jsonl")
            try FileManager.default.removeItem(atPath: dir + "/.basket-sync")
            #expect(try basketSync(["-C", dir, "init", "--adopt"]).status == 0)
        }
        #expect(try basketSync(["-C", dir, "push", "--id", "e3", "z=+5"]).status == 0)
        #expect(try basketSync(["-C", root, "sync"]).status == 0)
        let seqs = playground.records((tree ? "c2/" : "") + "outbox.jsonl").compactMap { $0["seq"] as? Int }
        #expect(seqs == [3], "numbered after the host's syncedThrough 2: \(seqs)")
        #expect(try basketSync(["-C", dir, "apply"]).status == 0)
        #expect(playground.read((tree ? "c2/" : "") + "cart.json").contains("\"z\""), "the new record is applied: \(playground.read((tree ? "c2/" : "") + "cart.json"))")
    }
}

extension CatchUpTests {
    /// Adoption takes whole records only — a torn last line or a host's own line taken as a record
    /// would glue the next record to it, or number it after 99, and leave apply stuck at 74 —,
    /// does not trust a claim the database had refused (seq 51 after 2), and keeps the deltas the
    /// host has not applied yet pending (else a repeated WebView state doubles them). Each case,
    /// then apply.
    @Test(arguments: ["torn", "hostLine", "bogusClaim", "unapplied"])
    func adoptionReadsWholeRecordsAndKeepsWhatWasPending(damage: String) throws {
        let playground = try Playground()
        let dir = playground.path
        #expect(try basketSync(["-C", dir, "init"]).status == 0)
        try playground.write("cart.json", cartJSON([], syncedThrough: 0))
        func run(_ arguments: [String]) throws { #expect(try basketSync(["-C", dir] + arguments).status == 0, "\(arguments)") }
        try run(["push", "--id", "e1", "A=+2"])
        for command in [["sync"], ["apply"], ["sync"]] { try run(command) }
        try run(["push", "--id", "e2", "A=+1", "B=+3"])
        try run(["sync"])
        switch damage {
        case "torn": try CatchUpTests.Interference.foreignLine.appendText(#"{"seq":3,"id":"x-3","type":"updateBasket","at":"2026-12-01T09:30:00.000Z","products":[{"id":"Q","quan"#, to: dir + "/outbox.jsonl")
        case "hostLine": try CatchUpTests.Interference.foreignLine.appendText("{\"seq\":99,\"note\":\"the host's line\"}\n", to: dir + "/outbox.jsonl")
        case "bogusClaim":
            try run(["apply"])
            try playground.write("cart.json", cartJSON([("A", 3), ("B", 3)], syncedThrough: 50))
            _ = try basketSync(["-C", dir, "sync"])
        default: break
        }
        try FileManager.default.removeItem(atPath: dir + "/.basket-sync")
        let adopted = try basketSync(["-C", dir, "init", "--adopt"])
        #expect(adopted.stdout.contains("outbox.jsonl: adopted 2 records, going on after 2"), "\(adopted.stdout) \(adopted.stderr)")
        // The WebView repeats what it shows (A 3, B 3: the pending delta included): nothing new.
        try run(["push", "--state", "--id", "s1", "A=3", "B=3"])
        try run(["push", "--id", "e3", "Z=+1"])
        try run(["sync"])
        if damage == "bogusClaim" {
            // Still claiming 50 while the outbox ends at 3: apply cannot know what the cart holds
            // (74, nothing written) until the host says it honestly.
            let refused = try basketSync(["-C", dir, "apply"])
            #expect(refused.status == 74 && refused.stderr.contains("beyond the outbox's last record (3)"), "\(refused.stderr)")
            try playground.write("cart.json", cartJSON([("A", 3), ("B", 3)], syncedThrough: 2))
        }
        try run(["apply"])
        let seqs = playground.read("outbox.jsonl").split(separator: "\n").compactMap { line -> Int? in
            guard let record = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], record["type"] != nil else { return nil }
            return record["seq"] as? Int
        }
        #expect(seqs == [1, 2, 3], "\(damage): one record more, numbered 3: \(playground.read("outbox.jsonl"))")
        let lines = products(try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as? [String: Any] ?? [:])
        #expect(lines == ["A": 3, "B": 3, "Z": 1], "\(damage): \(lines)")
    }
}

extension CatchUpTests {
    /// The database and every record gone (moved away), a host without syncedThrough: plain
    /// `init` must not number from 1 again, unseen by a host that counts. The events in inbox/cur/
    /// show the past: init refuses (73); --adopt goes on knowing them.
    @Test func initRefusesWhenOnlyTheInboxShowsThePast() throws {
        let playground = try Playground()
        let dir = playground.path
        #expect(try basketSync(["-C", dir, "init"]).status == 0)
        try playground.write("cart.json", "{\"products\": []}")
        for index in 1...3 { #expect(try basketSync(["-C", dir, "push", "--id", "e\(index)", "A=+1"]).status == 0) }
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        for name in ["outbox.jsonl", "notifications.jsonl"] { try FileManager.default.removeItem(atPath: dir + "/" + name) }
        try FileManager.default.removeItem(atPath: dir + "/.basket-sync")
        let refused = try basketSync(["-C", dir, "init"])
        #expect(refused.status == 73 && refused.stderr.contains("inbox/cur/ holds 3 events taken before"), "\(refused.status) \(refused.stderr)")
        #expect(try basketSync(["-C", dir, "init", "--adopt"]).status == 0)
        #expect(try basketSync(["-C", dir, "push", "--id", "e2", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        #expect(playground.records("outbox.jsonl").isEmpty, "e2 taken before: not done again")
    }
}

extension CatchUpTests {
    /// Rotation dropped the oldest parts before the database was lost, and the host had processed
    /// none: init --adopt names the lost records, and apply goes on from the first record a file
    /// holds instead of refusing for ever ("outbox seq 5 where 1 was expected", 74).
    @Test func adoptionNamesRecordsRotatedAwayAndApplyGoesOn() throws {
        let playground = try Playground()
        let dir = playground.path
        #expect(try basketSync(["-C", dir, "init"]).status == 0)
        try playground.writeAtomically("basket-sync.json", playground.read("basket-sync.json").replacingOccurrences(of: "\"rotate\": null", with: "\"rotate\": {\"maxBytes\": 200, \"keep\": 2}"))
        try playground.write("cart.json", cartJSON([], syncedThrough: 0))
        for index in 1...8 { try push(playground, "e\(index)") }
        try FileManager.default.removeItem(atPath: dir + "/.basket-sync")
        let adopted = try basketSync(["-C", dir, "init", "--adopt"])
        #expect(adopted.status == 0 && adopted.stdout.contains("are in no file (rotated away) and the host had not processed them: they are lost, and the host goes on from"), "\(adopted.stdout) \(adopted.stderr)")
        let apply = try basketSync(["-C", dir, "apply"])
        #expect(apply.status == 0, "apply goes on: \(apply.stderr)")
        let cart = try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as? [String: Any]
        #expect(cart?["syncedThrough"] as? Int == 8, "\(playground.read("cart.json"))")
    }

    /// A reader holding an exclusive lock on every output file (read access is enough for
    /// `flock`) blocks nothing: basket-sync's writers lock a file of their own (docs/spec.md §7).
    @Test func aReadersLockOnTheOutputFilesBlocksNothing() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        var held: [Int32] = []
        defer { for fd in held { close(fd) } }
        for name in ["outbox.jsonl", "notifications.jsonl", "payments.jsonl"] {
            let path = playground.path + "/" + name
            if !FileManager.default.fileExists(atPath: path) { _ = FileManager.default.createFile(atPath: path, contents: nil) }
            let fd = open(path, O_RDONLY)
            #expect(fd >= 0 && flock(fd, LOCK_EX) == 0, "\(name)")
            held.append(fd)
        }
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        let sync = try basketSync(["-C", playground.path, "sync"], killAfter: 120)
        #expect(sync?.status == 0, "sync must not wait for the reader's lock: \(String(describing: sync))")
        #expect(playground.records("outbox.jsonl").last.map(products) == ["A": 1])
    }

    /// A malformed event set aside: its `.error` names the file where it lies now, in `bad/`
    /// (line and column there), and where it came from — not a path in `new/` that is gone.
    @Test func theErrorBesideAnEventSetAsideNamesItInBad() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.write("inbox/new/evt-7", "{\"id\": \"evt-7\", \"type\": oops}")
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let error = playground.read("inbox/bad/evt-7.error")
        #expect(error.hasPrefix(playground.path + "/inbox/bad/evt-7:1:"), "\(error)")
        #expect(error.contains("Set aside from inbox/new/evt-7.") && !error.contains("/inbox/new/evt-7:"), "\(error)")
    }

    /// A sparse file at an output's name (64 GiB of hole) is never read whole: sync refuses it at
    /// once (73) naming it, status answers, and once it is moved away the record goes to a new
    /// file (docs/spec.md §7: every read bounded by what the file holds).
    @Test func aSparseOutputFileIsRefusedNotRead() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let path = playground.path + "/outbox.jsonl"
        let handle = try #require(FileHandle(forWritingAtPath: path))
        try handle.truncate(atOffset: 64 << 30)
        try handle.close()
        #expect(try basketSync(["-C", playground.path, "push", "B=+1"]).status == 0)
        let sync = try basketSync(["-C", playground.path, "sync"], killAfter: 120)
        #expect(sync?.status == 73 && sync?.stderr.contains("outbox.jsonl: holds a hole") == true, "\(String(describing: sync))")
        #expect(try basketSync(["-C", playground.path, "status"], killAfter: 120)?.status == 0)
        try FileManager.default.moveItem(atPath: path, toPath: path + ".sparse")
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect(playground.records("outbox.jsonl").last.map(products) == ["B": 1])
    }
}

extension HostileInputTests {
    /// A queue of events reaching the largest seq ends where taking them one by one ends: the
    /// events the last free numbers serve are taken, the next one fails the pass (73) and stays
    /// in new/ with those after it — in a sync directory and in a tree's cart (its root's pass).
    @Test(arguments: [false, true])
    func aQueueReachingTheLargestSeqIsTakenAsFarAsOneByOne(tree: Bool) throws {
        let playground = try Playground()
        let root = playground.path
        let dir = tree ? root + "/c1" : root
        if tree {
            #expect(try basketSync(["-C", root, "init", "--tree"]).status == 0)
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        }
        // The last record two numbers below the largest, adopted with the database made again.
        try #"{"seq":9007199254740989,"id":"abcdef0123456789-9007199254740989","type":"updateBasket","at":"2020-01-01T00:00:00.000Z","source":"e0","products":[{"id":"A","quantity":1}]}"#
            .appending("\n").write(toFile: dir + "/outbox.jsonl", atomically: false, encoding: .utf8)
        let adopt = try basketSync(["-C", dir, "init", "--adopt"])
        #expect(adopt.status == 0, "\(adopt.stderr)")
        for index in 1...4 {
            let name = "\(1_700_000_000 + index).M\(index)P1Q1.host"
            try #"{"id":"e\#(index)","type":"basketDelta","products":[{"id":"S\#(index)","quantity":1}]}"#.write(toFile: "\(dir)/inbox/new/\(name)", atomically: false, encoding: .utf8)
        }
        let sync = try basketSync(["-C", tree ? root : dir, "sync"])
        #expect(sync.status == 73, "\(sync.status) \(sync.stderr)")
        #expect(sync.stderr.contains("9007199254740991"), "\(sync.stderr)")
        let records = playground.records((tree ? "c1/" : "") + "outbox.jsonl")
        #expect(records.map { ($0["seq"] as? Int) ?? 0 } == [9007199254740989, 9007199254740990, 9007199254740991], "\(records)")
        #expect(records.dropFirst().map { $0["source"] as? String ?? "" } == ["e1", "e2"])
        #expect(playground.names((tree ? "c1/" : "") + "inbox/new").sorted() == ["1700000003.M3P1Q1.host", "1700000004.M4P1Q1.host"])
        #expect(playground.names((tree ? "c1/" : "") + "inbox/bad").isEmpty, "not the events' fault: none set aside")
    }

    /// Numbers past the largest seq (2^53 − 1, exact in every JSON reader) never crash, never
    /// wrap, and are refused where they come in — `wait --after`, `push --basket`, a cart's
    /// `syncedThrough`, a record line adopted — while the largest itself is taken; a directory
    /// whose numbers reached it refuses to number one more (73), its records as they were.
    @Test(arguments: ["9007199254740990", "9007199254740991", "9007199254740992", "9223372036854775807", "9223372036854775808", "18446744073709551615", "18446744073709551625", "1000000000000000000000000000000"])
    func numbersPastTheLargestSeqAreRefusedWhereTheyComeIn(number: String) throws {
        let within = Decimal(string: number)! <= Decimal(string: "9007199254740991")!
        let playground = try syncDirectory()
        try playground.write("cart.json", #"{"products":[],"syncedThrough":0}"#)
        let wait = try basketSync(["-C", playground.path, "wait", "--after", number, "--timeout", "0"])
        #expect(wait.status == (within ? 75 : 64), "wait --after \(number): \(wait.status) \(wait.stderr)")
        let push = try basketSync(["-C", playground.path, "push", "--state", "--basket", number, "a=1"])
        #expect(push.status == (within ? 0 : 64), "push --basket \(number): \(push.status) \(push.stderr)")
        #expect(try basketSync(["-C", playground.path, "sync"]).status < 128)
        #expect(playground.names("inbox/bad").isEmpty, "a basket push takes is never set aside: \(playground.names("inbox/bad"))")
        try playground.write("cart.json", #"{"products":[],"syncedThrough":\#(number)}"#)
        let apply = try basketSync(["-C", playground.path, "apply"])
        #expect(within ? apply.status == 74 : apply.status == 65 && apply.stderr.contains("from 0 to 9007199254740991"), "syncedThrough \(number): \(apply.status) \(apply.stderr)")
        #expect(try basketSync(["-C", playground.path, "sync"]).status < 128)
        // A record line numbered so, adopted with the database lost.
        try playground.write("cart.json", #"{"products":[],"syncedThrough":0}"#)
        #expect(try basketSync(["-C", playground.path, "push", "--id", "first", "a=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let record = try #require(playground.records("outbox.jsonl").last)
        let syncId = try #require((record["id"] as? String)?.split(separator: "-").first)
        let original = playground.read("outbox.jsonl")
        let head = #"{"seq":1,"id":"\#(syncId)-1""#
        #expect(original.hasPrefix(head), "\(original)")
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
        try playground.write("outbox.jsonl", #"{"seq":\#(number),"id":"\#(syncId)-\#(number)""# + original.dropFirst(head.count))
        let adopt = try basketSync(["-C", playground.path, "init", "--adopt"])
        guard within else {
            #expect(adopt.status == 65 && adopt.stderr.contains("outbox.jsonl:1:8: a record numbered past 9007199254740991"), "adopt \(number): \(adopt.status) \(adopt.stderr)")
            return
        }
        #expect(adopt.status == 0, "adopt \(number): \(adopt.stderr) \(playground.read("outbox.jsonl"))")
        #expect(try basketSync(["-C", playground.path, "push", "--id", "next", "b=+1"]).status == 0)
        let next = try basketSync(["-C", playground.path, "sync"])
        let records = playground.records("outbox.jsonl")
        if number == "9007199254740991" {
            #expect(next.status == 73 && next.stderr.contains("reached 9007199254740991") && records.count == 1, "\(next.status) \(next.stderr) \(records)")
        } else {
            #expect(next.status == 0 && records.count == 2 && "\(records.last?["seq"] ?? "")" == "9007199254740991", "\(next.status) \(next.stderr) \(records)")
        }
    }
}
