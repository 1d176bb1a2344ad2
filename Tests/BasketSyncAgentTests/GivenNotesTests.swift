import BasketSync
@testable import BasketSyncAgent
import Foundation
import Testing
import TestSupport

/// What each file was given is a note beside the records: a hint, the files the truth. Two
/// processes catching up leave every record once and the note as the file stands; a note left
/// behind the file (a kill between an append and its note) never gives a rotated file's last
/// records to the new one.
@Suite struct GivenNotesTests {
    /// Drops one event (A +1) with `id` into the inbox.
    func pushOne(_ directory: EngineTests.Directory, _ id: String) throws {
        _ = try Commands.push(directory: directory.path, kind: .delta, products: [RetailerProduct(id: "A", quantity: 1)], id: id)
    }

    func seqs(_ directory: EngineTests.Directory, _ name: String) -> [Int] {
        directory.lines(name).compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])?["seq"] as? Int }
    }

    /// Two engines on one directory append records, flush and catch up in a seeded order: the
    /// outbox holds every record once, in order, and the note says its size and last seq.
    @Test func twoProcessesLeaveEveryRecordOnceAndTheNoteAsTheFile() throws {
        let seed = Knobs.seed
        var random = SplitMix64(seed: seed)
        for round in 0..<Knobs.value("BASKET_SYNC_RUNS", default: 3) {
            let directory = try EngineTests.Directory()
            let quiet = Logger(fd: open("/dev/null", O_WRONLY))
            let engines = [try SyncEngine(directory: directory.path, isSynchronizerRegistered: true, logger: quiet),
                           try SyncEngine(directory: directory.path, isSynchronizerRegistered: true, logger: quiet)]
            var steps: [String] = []
            for index in 0..<120 {
                let action = random.below(3)
                let engine = engines[random.below(2)]
                steps.append("\(action)")
                switch action {
                case 0:
                    try pushOne(directory, "e\(index)")
                    _ = try engine.pass([.inbox])
                case 1: try engine.flush()
                default: _ = try engine.pass(.everything)
                }
            }
            for engine in engines { try engine.flush() }
            let context = "seed \(seed), round \(round), steps \(steps.joined())"
            let last = try engines[0].store.withTransaction { () throws(AgentError) in try engines[0].store.lastSeq(.outbox) }
            #expect(seqs(directory, "outbox.jsonl") == Array(stride(from: 1, through: Int(last), by: 1)), "\(context)")
            let reader = try Store(directory: directory.path, create: false)
            let note = try reader.withTransaction { () throws(AgentError) in try reader.given(.outbox) }
            let size = (try? FileManager.default.attributesOfItem(atPath: directory.path + "/outbox.jsonl")[.size] as? Int) ?? nil
            #expect(note?.seq == last && note.map { Int($0.size) } == size, "\(context): the note \(note.map(\.text) ?? "none"), the file \(size ?? -1) bytes through \(last)")
        }
    }

    /// A file rotated away (logrotate's create: NAME → NAME.1, a new empty NAME) whose note was
    /// left one record behind (a kill between the append and its note): the next catch-up reads
    /// how far NAME.1 got and gives the new file only what came after.
    @Test func aFileRotatedAwayIsNotGivenItsLastRecordsAgainWhateverTheNoteSays() throws {
        let directory = try EngineTests.Directory()
        let quiet = Logger(fd: open("/dev/null", O_WRONLY))
        let agent = try SyncEngine(directory: directory.path, isSynchronizerRegistered: true, logger: quiet)
        var behind: AppendCursor?
        for index in 1...3 {
            behind = try agent.store.withTransaction { () throws(AgentError) in try agent.store.given(.outbox) }
            try pushOne(directory, "e\(index)")
            _ = try agent.pass([.inbox])
        }
        let left = try #require(behind)
        #expect(left.seq == 2)
        try agent.store.withTransaction { () throws(AgentError) in try agent.store.noteGiven(.outbox, left) }
        try FileManager.default.moveItem(atPath: directory.path + "/outbox.jsonl", toPath: directory.path + "/outbox.jsonl.1")
        try directory.write("outbox.jsonl", "")
        try pushOne(directory, "e4")
        let oneShot = try SyncEngine(directory: directory.path, isSynchronizerRegistered: true, logger: quiet)
        _ = try oneShot.pass(.everything)
        #expect(seqs(directory, "outbox.jsonl.1") == [1, 2, 3])
        #expect(seqs(directory, "outbox.jsonl") == [4], "the rotated part ends at 3: the new file starts after it")
    }

    /// The records a step just made are appended as made only when the file is as this process
    /// left it and they follow its last record. Two processes, a third killed between its commit
    /// and its append, files moved away (a rotator) and last lines cut (a power cut), in a seeded
    /// order: the files still hold every record once, in order.
    @Test func recordsJustMadeAreAppendedAsMadeOnlyWhenNothingBeforeThemCanBeMissing() throws {
        let seed = Knobs.seed
        var random = SplitMix64(seed: seed)
        let quiet = Logger(fd: open("/dev/null", O_WRONLY))
        let names = ["outbox.jsonl", "notifications.jsonl"]
        for round in 0..<Knobs.value("BASKET_SYNC_RUNS", default: 3) {
            let directory = try EngineTests.Directory()
            let engines = [try SyncEngine(directory: directory.path, isSynchronizerRegistered: true, logger: quiet),
                           try SyncEngine(directory: directory.path, isSynchronizerRegistered: true, logger: quiet)]
            try pushOne(directory, "first")
            _ = try engines[0].pass(.everything)
            var moved = 0
            var cut: Set<String> = []
            var steps: [String] = []
            for index in 0..<150 {
                let action = random.below(7)
                let engine = engines[random.below(2)]
                steps.append("\(action)")
                switch action {
                case 0:
                    try pushOne(directory, "e\(index)")
                    _ = try engine.pass([.inbox])
                case 1:
                    try directory.write("cart.json", #"{"products":[{"id":"A","quantity":\#(index)}]}"#)
                    _ = try engine.pass([.cart])
                case 2:
                    // Killed between its commit and its append: the record is in the database only.
                    try directory.write("cart.json", #"{"products":[{"id":"A","quantity":\#(index)}]}"#)
                    let killed = try SyncEngine(directory: directory.path, isSynchronizerRegistered: true, logger: quiet)
                    _ = try killed.store.withTransaction { () throws(AgentError) in try killed.readCartInTransaction() }
                case 3:
                    let name = names[random.below(2)]
                    if cut.remove(name) != nil { _ = try engine.pass(.publish) }
                    moved += 1
                    _ = rename(directory.path + "/" + name, directory.path + "/\(name).moved\(moved)")
                case 4:
                    // The last line cut under the file's writers (one line of several, and
                    // caught up before the file is moved away: a file cut to nothing, or moved
                    // away cut, is a copytruncate, whose loss is documented).
                    let name = names[random.below(2)]
                    let bytes = Array(directory.read(name).utf8)
                    if let end = bytes.dropLast().lastIndex(of: UInt8(ascii: "\n")) {
                        _ = truncate(directory.path + "/" + name, off_t(end + 1))
                        cut.insert(name)
                    }
                case 5: try engine.flush()
                default: _ = try engine.pass(.everything)
                }
            }
            for engine in engines {
                _ = try engine.pass(.everything)
                try engine.flush()
            }
            let context = "seed \(seed), round \(round), steps \(steps.joined())"
            for (name, projection) in zip(names, [Projection.outbox, .notifications]) {
                let last = try engines[0].store.withTransaction { () throws(AgentError) in try engines[0].store.lastSeq(projection) }
                let parts = (0..<moved).map { "\(name).moved\($0 + 1)" }.filter { FileManager.default.fileExists(atPath: directory.path + "/" + $0) } + [name]
                let held = parts.flatMap { seqs(directory, $0) }
                #expect(held == Array(stride(from: 1, through: Int(last), by: 1)), "\(context): \(name) and the files moved away hold \(held), the database 1…\(last)")
            }
        }
    }

    /// Records appended as made write what this process knows of the file: after a flush (an
    /// engine's own fsyncs, or the agent's flush of many carts together), that it is durable
    /// through the records flushed — never less than the flush's own note said.
    @Test(arguments: [false, true]) func recordsAppendedAfterAFlushKeepTheNoteDurableThroughIt(together: Bool) throws {
        let directory = try EngineTests.Directory()
        let quiet = Logger(fd: open("/dev/null", O_WRONLY))
        let engine = try SyncEngine(directory: directory.path, isSynchronizerRegistered: true, logger: quiet)
        func note() throws -> AppendCursor? { try engine.store.withTransaction { () throws(AgentError) in try engine.store.given(.outbox) } }
        for index in 1...3 {
            try pushOne(directory, "e\(index)")
            _ = try engine.pass([.inbox])
        }
        if together {
            var flush = FlushTogether()
            flush.take(engine, cart: "")
            flush.openDevices()
            #expect(flush.finish(FlushTogether.syncAll(flush.devices.map { ($0.fd, $0.path) }), logger: quiet).isEmpty)
        } else {
            try engine.flush()
        }
        if together {
            // The flush of the whole file system is one note on the root's row: it covers the
            // file's note (read after a restart of the machine as durable through its seq).
            let flushed = try engine.store.withTransaction { () throws(AgentError) in try engine.store.database.rootRows.note(.flushed) }
            let given = try #require(try note())
            let at = try #require(given.at)
            #expect(given.seq == 3 && FlushedNote.covers(flushed, device: given.device, boot: given.boot, at: at), "the flush noted records 1…3 durable: \(flushed ?? "no note")")
        } else {
            #expect(try note()?.durable == 3, "the flush noted records 1…3 durable")
        }
        try pushOne(directory, "e4")
        _ = try engine.pass([.inbox])
        let after = try note()
        #expect(after?.seq == 4 && after?.durable == 3, "after the next append: \(after.map(\.text) ?? "no note")")
    }
}

extension GivenNotesTests {
    /// A failed flush's take-back waits for the writers' lock a bounded time, as every lock wait
    /// does: while another open of the lock holds it (another process), the take-back returns and
    /// the lines stay; once it is free, the same take-back cuts them off and notes the file as before them.
    @Test func aTakeBackWaitsForTheWritersLockABoundedTime() throws {
        let directory = try EngineTests.Directory()
        let store = try Store(directory: directory.path, create: false)
        let before = "{\"seq\":1}\n"
        try directory.write("outbox.jsonl", before + "{\"seq\":2}\n")
        var info = stat()
        #expect(stat(directory.path + "/outbox.jsonl", &info) == 0)
        let given = AppendCursor(device: UInt64(info.st_dev), inode: UInt64(info.st_ino), size: Int64(info.st_size), seq: 2, durable: 1)
        let flush = JSONLinesFile.Flush(path: directory.path + "/outbox.jsonl", given: given, sizeBefore: Int64(before.utf8.count), givenBefore: nil)
        let held = open(store.stateDirectory + "/" + Layout.projectionsLock, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        try #require(held >= 0 && flock(held, LOCK_EX) == 0, "the writers' lock held")
        SyncEngine.takeBack(store, .outbox, flush, waitingAtMost: 0.2)
        #expect(directory.read("outbox.jsonl") == before + "{\"seq\":2}\n", "nothing cut while the lock is held elsewhere")
        close(held)
        SyncEngine.takeBack(store, .outbox, flush, waitingAtMost: 0.2)
        #expect(directory.read("outbox.jsonl") == before, "cut back to the size before the flush's appends")
        let note = try store.withTransaction { () throws(AgentError) in try store.given(.outbox) }
        #expect(note?.size == Int64(before.utf8.count) && note?.seq == 0, "\(note.map(\.text) ?? "none")")
    }
}
