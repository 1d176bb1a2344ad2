import BasketSyncWire
import Glibc

/// The records that JSON Lines files project from the database.
package enum Projection: String, CaseIterable, Sendable {
    case outbox
    case notifications
    case payments

    /// The file in the sync directory.
    var fileName: String { "\(rawValue).jsonl" }

    /// A number of its own for the table it is kept in (from 1).
    var tableNumber: Int {
        switch self {
        case .outbox: 1
        case .notifications: 2
        case .payments: 3
        }
    }

    /// Whether a line (with its newline) reads as a whole record of this file.
    func isRecord(_ line: [UInt8]) -> Bool {
        switch self {
        case .outbox: (try? RecordFormat.outboxRecord(line)) != nil
        case .notifications: (try? RecordFormat.notification(line)) != nil
        case .payments: (try? RecordFormat.payment(line)) != nil
        }
    }

    /// Whether `line` is a record of the sync directory (or tree cart) `syncId`: an outbox
    /// record's id is `"<syncId>-<seq>"`, so another cart's outbox line, moved in, is none of its
    /// records (the other files carry no such id: any record of theirs counts). Without a sync
    /// id, any record.
    func isRecord(_ line: [UInt8], of syncId: String?) -> Bool {
        guard self == .outbox, let syncId else { return isRecord(line) }
        guard let record = try? RecordFormat.outboxRecord(line) else { return false }
        return record.id.hasPrefix(syncId + "-")
    }
}

/// How far a JSON Lines file was given records, as the database remembers it: the file it was
/// (device, inode), its size after the last append, and the last seq appended. The catch-up goes
/// on from it when the file is still that file at that size; anything else (moved away,
/// truncated, replaced) starts again with the next record.
///
/// A line is written after its record's commit and fsynced later (docs/spec.md §6: one fsync per
/// change): `durable` is the last seq known to be on disk, and `boot` the machine's boot when the
/// lines after it were appended. When the machine started again since (a power cut, a crash of
/// the kernel), the lines after `durable` may be gone, whatever the file looks like now: they are
/// written again unless the file still ends with them — unless a flush of the file's file
/// system that began after `at` (the boot clock when the note was made, after the append) is
/// noted (``FlushTogether``: one note for all the files a flush made durable, not one each).
struct AppendCursor: Equatable {
    var device: UInt64
    var inode: UInt64
    var size: Int64
    var seq: UInt64
    var durable: UInt64
    var boot: String
    /// Nanoseconds on the boot clock when the note was made; nil in a note made before it was kept.
    var at: UInt64?

    /// The cursor as the database keeps it: "device inode size seq durable boot@at" (an older
    /// version reads "boot@at" as another boot: it looks at the file's end, which is safe).
    var text: String { String(decoding: bytes, as: UTF8.self) }

    /// ``text``'s bytes.
    var bytes: [UInt8] {
        var writer = JSONWriter()
        writer.integer(device)
        writer.raw(" ")
        writer.integer(inode)
        writer.raw(" ")
        writer.integer(size)
        writer.raw(" ")
        writer.integer(seq)
        writer.raw(" ")
        writer.integer(durable)
        writer.raw(" ")
        writer.raw(text: boot)
        if let at {
            writer.raw("@")
            writer.integer(at)
        }
        return writer.bytes
    }

    /// A cursor read back (one written before `durable` existed was fsynced: durable through `seq`).
    init?(text: String) { self.init(bytes: Array(text.utf8)) }

    /// A cursor read back from ``bytes``.
    init?(bytes: [UInt8]) {
        let fields = NoteNumbers.fields(bytes)
        let numbers = fields.prefix(5).compactMap(NoteNumbers.uint64)
        guard fields.count == 4 || fields.count == 6, numbers.count == min(fields.count, 5), numbers[2] <= UInt64(Int64.max) else { return nil }
        // "boot@at": the boot, and the boot clock when the note was made (digits after the last
        // "@"; anything else is all the boot's).
        var boot = fields.count == 6 ? fields[5] : []
        var at: UInt64?
        if let mark = boot.lastIndex(of: UInt8(ascii: "@")), let nanoseconds = NoteNumbers.uint64(boot[(mark + 1)...]) {
            at = nanoseconds
            boot = boot[..<mark]
        }
        self.init(device: numbers[0], inode: numbers[1], size: Int64(numbers[2]), seq: numbers[3],
                  durable: fields.count == 6 ? min(numbers[4], numbers[3]) : numbers[3],
                  boot: String(decoding: boot, as: UTF8.self), at: at)
    }

    init(device: UInt64, inode: UInt64, size: Int64, seq: UInt64, durable: UInt64, boot: String = AppendCursor.boot, at: UInt64? = Posix.bootNanoseconds()) {
        self.device = device
        self.inode = inode
        self.size = size
        self.seq = seq
        self.durable = durable
        self.boot = boot
        self.at = at
    }

    /// Equal when they say the same of the file: when the note was made (``at``) is not compared
    /// (a catch-up that finds the file as noted leaves the note as it is).
    static func == (a: AppendCursor, b: AppendCursor) -> Bool {
        a.device == b.device && a.inode == b.inode && a.size == b.size && a.seq == b.seq && a.durable == b.durable && a.boot == b.boot
    }

    /// The seq after which lines may have been lost with the page cache: the machine started
    /// again since lines after `durable` were appended. Nil when nothing can have been lost.
    var lostAfter: UInt64? { durable < seq && boot != AppendCursor.boot ? durable : nil }

    /// This boot of the machine.
    static var boot: String { Posix.bootId }
}

/// Appends a projection's records to its JSON Lines file, after the database commit.
///
/// Each call catches the file up with the database under the writers' lock — a lock file in
/// `.basket-sync/`, never the output file itself: a reader may lock any file it can read, and
/// nothing a reader does blocks basket-sync (docs/spec.md §7) — so that several processes never
/// write the same record twice. Catch-up goes by `seq`, never by line count: the
/// database remembers what the file was given (``AppendCursor``: the file's identity, its size and the
/// last seq appended). A file that ends with one of our records goes on after it (after a crash,
/// a torn tail is cut first, and what a power loss took is written again from the database); a
/// line that is not a record (blank, foreign) is left alone and reported, and the next record
/// follows what was given; a file moved away, truncated or deleted (rotation) starts again with
/// the next record. Nothing is ever appended twice. A reader only ever sees complete
/// lines once the fsync returns.
///
/// The file stays open between catch-ups (in the agent, for as long as it runs): closing a file
/// opened for writing is an inotify event in the sync directory the agent watches, which woke it
/// after each of its own steps. It is opened again when the path no longer names the open file
/// (moved away, deleted, replaced).
final class JSONLinesFile {
    let path: String
    /// What the file was given, as of this process's last catch-up.
    private(set) var given: AppendCursor?
    /// The descriptor kept open, and the file it is open on.
    private var open: (fd: Int32, device: UInt64, inode: UInt64)?
    /// Whether ``descriptor()`` just made the file (the path was empty): then it is not the file
    /// given before, whatever its inode number (a file deleted since may have left it free).
    private var madeHere = false
    /// The appends not fsynced yet (docs/spec.md §6: the line is written after its record's
    /// commit, and flushed later): the descriptor, the file's size before the first of them and
    /// what was given then. ``flushed(_:)`` ends them.
    private var unsynced: (fd: Int32, path: String, sizeBefore: Int64, givenBefore: AppendCursor?)?
    /// The last record this process appended, and where in which file it ends: the file's last
    /// line for as long as nobody else writes to it.
    private var lastAppended: (device: UInt64, inode: UInt64, end: Int64, seq: UInt64, line: [UInt8])?

    /// What a file was given: which file, how long it was after the append, the last seq in it.
    /// What a catch-up did.
    struct Outcome: Equatable {
        var appended = 0
        var truncatedBytes = 0
        /// The file was not the one given before (moved away, truncated, deleted): it started again.
        var restarted = false
        /// The last line is not a record: left alone.
        var foreignTail = false
        /// The bytes of an unfinished last line (no newline) that is not one of ours torn by a
        /// crash: another program's, left alone; a newline ends it before the next record.
        var foreignUnfinished: Int64 = 0
        /// The last line is a record, but a copy of one before it (the file copied or edited by
        /// another program): its seq; left alone.
        var copiedTail: UInt64?
        /// The file was rotated after the append: nil when not; "" when done; else why it failed.
        var rotated: String?
        /// Records given again, first…last: they had left the live files (see ``catchUp``).
        var reappended: (UInt64, UInt64)?
        /// The file given was cut under basket-sync (it shrank: copytruncate).
        var shrank = false
        /// The machine started again before the lines after this seq were flushed: they were
        /// looked for in the file, and written again where missing.
        var lostAfter: UInt64?

        static func == (a: Outcome, b: Outcome) -> Bool {
            a.appended == b.appended && a.truncatedBytes == b.truncatedBytes && a.restarted == b.restarted && a.foreignTail == b.foreignTail && a.foreignUnfinished == b.foreignUnfinished && a.copiedTail == b.copiedTail
                && a.rotated == b.rotated && a.reappended?.0 == b.reappended?.0 && a.reappended?.1 == b.reappended?.1 && a.shrank == b.shrank
                && a.lostAfter == b.lostAfter
        }
    }

    /// Rotation past a size (`"rotate"` in basket-sync.json); nil: never.
    var rotation: AgentConfiguration.Rotation?

    init(path: String) { self.path = path }

    deinit { close() }

    /// Closes the file kept open, if any. Appends not flushed yet are fsynced first — all it
    /// holds with `flushing` (a file moved away: it leaves durable, before any line goes to the
    /// next file) — a failure leaving them to the rule of lines a power cut took.
    func close(flushing: Bool = false) {
        if let open {
            if flushing || unsynced?.fd == open.fd, (try? Posix.fsync(open.fd, path: path)) != nil { closedFlushed = (open.device, open.inode, given?.seq ?? 0) }
            Posix.close(open.fd)
        }
        unsynced = nil
        open = nil
    }

    /// The file whose appends ``close()`` flushed, through which seq: the next catch-up notes it.
    private var closedFlushed: (device: UInt64, inode: UInt64, seq: UInt64)?

    /// The descriptor on the file the path names now: the one kept open while the path still
    /// names it, else a new one (the file is created when missing, never through a link).
    private func descriptor() throws(SystemError) -> Int32 {
        if let open {
            if let now = Posix.info(path, follow: false), now.kind == .regular, now.device == open.device, now.inode == open.inode {
                return open.fd
            }
            // Moved away (a rotator), deleted or replaced: what it was given is made durable
            // before the next file gets a line, so that a power cut cannot keep a later line
            // and lose an earlier one in the part that was moved.
            close(flushing: true)
            // The file was renamed to NAME.1 within the last second and the path is empty: a
            // rotator (logrotate's create) makes the new file right after its rename. Made here
            // first, ours would be in its way (moved aside to a .backup with what it was given,
            // and a reader following the name would see its records twice): the rotator is given
            // until a second after its rename. The wait counts from the rename, so files rotated
            // together (a tree's carts under one logrotate run) cost one second in all, not one
            // each; a rename older than that (nocreate) is not waited for; a clock set back
            // costs at most the second.
            if Posix.info(path, follow: false) == nil, let moved = Posix.info("\(path).1", follow: false),
               moved.device == open.device, moved.inode == open.inode {
                let left = (Double(moved.changed) + Double(JSONLinesFile.creatorGrace) - Double(Posix.wallClockNanoseconds())) / 1e9
                let deadline = Posix.monotonicSeconds() + min(left, Double(JSONLinesFile.creatorGrace) / 1e9)
                while Posix.info(path, follow: false) == nil, Posix.monotonicSeconds() < deadline { Posix.pause(microseconds: 2_000) }
            }
        }
        // Made here only where the path is empty (exclusively: made meanwhile by another, it is
        // opened as found).
        var made = false
        var opened = try? Posix.open(path, [.readWrite, .append])
        if opened == nil, Posix.info(path, follow: false) == nil, let fd = try? Posix.open(path, [.readWrite, .create, .exclusive, .append]) {
            opened = fd
            made = true
        }
        let fd: Int32
        if let opened { fd = opened } else { fd = try Posix.open(path, [.readWrite, .create, .append]) }
        do throws(SystemError) {
            let info = try Posix.fileInfo(fd, path: path)
            // Another name for it may be outside the directory: basket-sync appends only to a
            // file of its own.
            guard info.links <= 1 else {
                var error = SystemError(path: path, shape: FileInfo.Kind.regular.name)
                error.refusal = "has \(info.links) hard links, and another name for it may be outside the directory; basket-sync appends only to a file of its own: remove the other names, or move the file away (the next record starts a new one)"
                throw error
            }
            // Made first by another account at a name basket-sync writes: not its file.
            if let reason = Trust.foreignOutput(info) {
                var error = SystemError(path: path, shape: FileInfo.Kind.regular.name)
                error.refusal = reason
                throw error
            }
            guard !Posix.hasHole(fd, size: info.size) else { throw JSONLinesFile.sparse(path) }
            open = (fd, info.device, info.inode)
            madeHere = made
        } catch {
            Posix.close(fd)
            throw error
        }
        return fd
    }

    /// How long after a rotator moved the file to NAME.1 an append waits for it to make the new
    /// one, in nanoseconds.
    static let creatorGrace: Int64 = 1_000_000_000

    /// The most records a restarted file is given again (see ``catchUp``): beyond, the next record
    /// starts it, and the gap is said.
    static let reappendAtMost: UInt64 = 100_000

    /// The last seq of the newest rotated part, NAME.1, when it ends with one of our records, and
    /// whether NAME.1 is the file `given` was about.
    private func newestPart(given: AppendCursor?, recordAt: (UInt64) throws(AgentError) -> [UInt8]?) -> (seq: UInt64, isGiven: Bool)? {
        let part = JSONLinesFile(path: "\(path).1")
        // Judged by the descriptor read (its fstat), never by a look at the name before: a file
        // renamed in between is not taken for the file given.
        guard let (fd, info) = try? Posix.openWithInfo(part.path, [.readOnly]) else { return nil }
        defer { Posix.close(fd) }
        guard info.kind == .regular else { return nil }
        guard let tail = try? part.readTail(fd, size: info.size), tail.lastSeq > 0,
              let stored = (try? recordAt(tail.lastSeq)) ?? nil else { return nil }
        // The last line must be that record, byte for byte: a forged part is not the chain.
        let start = tail.completeSize - Int64(stored.count)
        guard start >= 0, (try? part.read(fd, at: start, count: stored.count)) == stored else { return nil }
        return (tail.lastSeq, given.map { $0.device == info.device && $0.inode == info.inode } ?? false)
    }

    /// Whether the path names the file `given` was about (same device and inode), at the size it
    /// was left at: nothing was added, cut or swapped since (a stat, nothing opened).
    func isAsGiven(_ given: AppendCursor) -> Bool {
        guard let info = Posix.info(path, follow: false), info.kind == .regular else { return false }
        return info.device == given.device && info.inode == given.inode && info.size == given.size
    }

    /// Whether a catch-up has nothing to do: the file is as given, and given the database's last
    /// record. Nothing is opened (opening for writing, then closing, is an inotify event).
    func isCaughtUp(given: AppendCursor?, lastDatabaseSeq: UInt64) -> Bool {
        // After a restart of the machine, lines not flushed are read back before they count.
        guard let given, given.seq == lastDatabaseSeq, given.lostAfter == nil, isAsGiven(given) else { return false }
        self.given = given
        return true
    }

    /// Brings the file up to date with the database. Under the file's lock, `loadGiven` reads what
    /// the database remembers the file was given (another process may have appended since) and
    /// `saveGiven` records what it is given now. `fetch` is called with the seq to go on after and
    /// returns the records to append; `lastDatabaseSeq` says the database's last seq, to refuse a
    /// file that holds more than the database (a lost or replaced database).
    ///
    /// `made`: records just committed by this process, in seq order. When the file is the one
    /// this process last gave (same file, same size: nobody appended, cut or replaced it since)
    /// and they follow its last record with no gap, they are what it lacks: appended as they are,
    /// without reading the database — no record before them can be missing, and one made by
    /// another process after them is that process's to append (or the next catch-up's).
    func catchUp(
        lock: () throws(AgentError) -> Int32,
        unlock: (Int32) -> Void,
        loadGiven: () throws(AgentError) -> AppendCursor?,
        saveGiven: (AppendCursor) throws(AgentError) -> Void,
        lastDatabaseSeq: () throws(AgentError) -> UInt64,
        recordAt: (UInt64) throws(AgentError) -> [UInt8]?,
        isRecord: ([UInt8]) -> Bool,
        fetch: (UInt64) throws(AgentError) -> [(seq: UInt64, line: [UInt8])],
        made: [(seq: UInt64, line: [UInt8])] = []
    ) throws(AgentError) -> Outcome {
        let fd: Int32
        let info: FileInfo
        let held = try lock()
        defer { unlock(held) }
        do {
            fd = try descriptor()
        } catch {
            close()
            throw .system(error)
        }
        let madeNow = madeHere
        madeHere = false
        do {
            info = try Posix.fileInfo(fd, path: path)
        } catch {
            close()
            throw .system(error)
        }

        if !madeNow, let known = given, closedFlushed == nil, known.lostAfter == nil, known.device == info.device, known.inode == info.inode,
           known.size == info.size, let first = made.first, first.seq == known.seq + 1,
           zip(made, made.dropFirst()).allSatisfy({ $0.seq + 1 == $1.seq }), try !lastLineWrittenOver(known, fd: fd) {
            return try append(made, to: fd, info: info, size: info.size, durable: min(known.durable, known.seq), saveGiven: saveGiven, outcome: Outcome())
        }
        given = try loadGiven()
        let remembered = given
        // Appends to a file the path no longer names were fsynced when it was closed: durable.
        if let flushed = closedFlushed, var known = given, known.device == flushed.device, known.inode == flushed.inode {
            known.durable = max(known.durable, min(flushed.seq, known.seq))
            given = known
        }
        closedFlushed = nil
        var outcome = Outcome()
        var size = info.size
        let start: UInt64
        // The machine started again while lines were not flushed: what the file holds is all
        // that is known of them (a power cut takes lines, even a whole new file, and no interference
        // need be read into it).
        let lostAfter = given?.lostAfter
        outcome.lostAfter = lostAfter
        let sameFile = !madeNow && (given.map { $0.device == info.device && $0.inode == info.inode && $0.size <= size } ?? false)
        outcome.shrank = !madeNow && lostAfter == nil && (given.map { $0.device == info.device && $0.inode == info.inode && $0.size > size } ?? false)
        if let given, sameFile, given.size == size, lostAfter == nil, try !lastLineWrittenOver(given, fd: fd) {
            start = given.seq
        } else {
            let tail = try readTail(fd, size: size)
            // The lines after the last one of ours (verified against the database, byte for byte)
            // are not ours: a blank, a host's line, a line that only looks like a record. One that
            // is a whole record beyond the database means the database is behind (lost,
            // restored): refused before anything is changed.
            let databaseSeq = try lastDatabaseSeq()
            // Our records are in the file in seq order: a line of ours followed (further down)
            // by one whose seq is not higher is a copy, not where the file got to.
            var candidate: (seq: UInt64, isLast: Bool)?
            var lastOurs: UInt64 = 0
            var first = true
            // The last line when it is one of our records (a copy of one before it, or not).
            var lastLineRecord: UInt64?
            try linesBackward(fd, end: tail.completeSize) { (start, length) throws(AgentError) in
                defer { first = false }
                let prefix = try read(fd, at: start, count: min(length, 32))
                let seq = RecordFormat.seq(ofLine: prefix)
                guard seq > 0 else { return true }
                if seq > databaseSeq {
                    if isRecord(try read(fd, at: start, count: length + 1)) {
                        throw .databaseBehind(path: path, fileSeq: seq, databaseSeq: databaseSeq)
                    }
                    return true
                }
                guard let stored = try recordAt(seq), stored.count == length + 1,
                      try read(fd, at: start, count: length + 1) == stored else { return true }
                if first { lastLineRecord = seq }
                if let current = candidate, seq < current.seq {
                    lastOurs = current.seq  // in order: the candidate is where the file got to
                    return false
                }
                candidate = (seq, candidate == nil && first)
                return true
            }
            if lastOurs == 0, let candidate { lastOurs = candidate.seq }  // the only record of ours
            // Shorter, but still holding records of ours: edited in place by another program (its
            // last line judged below), not cut by a rotator — a cut file holds none of the records
            // it held (a process appending after the cut finds it shorter first, and says so).
            let editedShorter = outcome.shrank && candidate != nil
            if editedShorter { outcome.shrank = false }
            let lastLineIsOurs = candidate.map { $0.isLast && $0.seq == lastOurs } ?? false
            outcome.foreignTail = tail.completeSize > 0 && !lastLineIsOurs && lastLineRecord == nil
            outcome.copiedTail = lastLineIsOurs ? nil : lastLineRecord
            if lastLineIsOurs {
                // The file ends with one of our records: go on after it. It may be behind what was
                // given (a power loss took an un-fsynced tail, a backup was restored): the records
                // after it are written again, exactly once.
                start = lastOurs
            } else {
                // Empty, or ending with lines that are not ours: rotated, truncated, re-created,
                // or written to by someone else — the next record follows what was given, or our
                // last record in the file if that is further.
                var next = max(lostAfter ?? given?.seq ?? 0, lastOurs)
                if let given, !sameFile, candidate == nil, let part = newestPart(given: given, recordAt: recordAt) {
                    if part.isGiven {
                        // The file given, rotated away, says itself how far it got: a note left
                        // behind it (a kill between an append and its note) never makes its last
                        // records given again.
                        next = max(next, part.seq)
                    } else if part.seq < given.seq, given.seq - part.seq <= JSONLinesFile.reappendAtMost {
                        // The live files are whole by seq: when the newest rotated part (NAME.1)
                        // ends before what was given and is not the file given, the records
                        // between went where no reader of the live files sees them — logrotate's
                        // create moved our new file aside to a .backup, copytruncate cut what came
                        // after its copy — and are given again, here, once.
                        next = part.seq
                        outcome.reappended = (part.seq + 1, given.seq)
                    }
                }
                start = next
                // Not said when the file given before is NAME.1 now: rotated (by basket-sync, or
                // logrotate), which is what rotation does, not an interference.
                let rotated = given.map { given in
                    Posix.info("\(path).1", follow: false).map { $0.device == given.device && $0.inode == given.inode } ?? false
                } ?? false
                outcome.restarted = given != nil && !sameFile && !rotated && lostAfter == nil && !editedShorter
            }
            // An unfinished last line is cut only when it is ours, torn by a crash: after the
            // machine started again, whatever follows the last whole line; else only the start of
            // the record due next, byte for byte (a byte a power cut zeroed aside). Another
            // program's unfinished line is left alone.
            let unfinished = size - tail.completeSize
            var torn = unfinished > 0 && lostAfter != nil
            if unfinished > 0, !torn { torn = try isTorn(fd, at: tail.completeSize, count: unfinished, of: try recordAt(start + 1)) }
            // Not the file given, holding lines of which none is ours: put here by someone (another
            // cart's file moved in, a forged one). basket-sync appends only to files it wrote here:
            // refused, untouched (a file given and then written to by a host is still ours).
            if !sameFile, tail.completeSize > 0 || unfinished > 0 && !torn, candidate == nil {
                close()
                throw .refused("\(path): holds lines but none of this directory's records, and is not the file basket-sync was writing: it was put there (another cart's file, a forged one); basket-sync appends only to its own files. Move it away: the next record starts a new file")
            }
            if torn {
                do { try Posix.truncate(fd, to: tail.completeSize, path: path) } catch { throw .system(error) }
                outcome.truncatedBytes = Int(unfinished)
                size = tail.completeSize
            } else if unfinished > 0 {
                outcome.foreignUnfinished = unfinished
            }
        }

        // What is known on disk: after the machine started again, whatever the file holds now
        // (read back from the disk); else what was known before.
        let durable = lostAfter != nil ? start : min(given?.durable ?? 0, start)
        let records = try fetch(start)
        guard !records.isEmpty else {
            if outcome.truncatedBytes > 0 {
                do { try Posix.fsync(fd, path: path) } catch { throw .system(error) }
            }
            // An unfinished line of another program's is not taken as given: it may still be
            // being written, and is judged again, whole or not, at the next catch-up.
            given = AppendCursor(device: info.device, inode: info.inode, size: size - outcome.foreignUnfinished, seq: start, durable: durable)
            if given != remembered { try saveGiven(given!) }
            return outcome
        }
        return try append(records, to: fd, info: info, size: size, durable: durable, saveGiven: saveGiven, outcome: outcome)
    }

    /// Appends `records` (at least one) to the file open on `fd`, `size` bytes long: the records
    /// after what it holds, `durable` through the seq known on disk.
    private func append(
        _ records: [(seq: UInt64, line: [UInt8])], to fd: Int32, info: FileInfo, size: Int64, durable: UInt64,
        saveGiven: (AppendCursor) throws(AgentError) -> Void, outcome: Outcome
    ) throws(AgentError) -> Outcome {
        var outcome = outcome
        let newLast = records.last!.seq
        var bytes: [UInt8] = []
        bytes.reserveCapacity(records.reduce(1) { $0 + $1.line.count })
        // Another program's unfinished line is ended first: the record starts a line of its own.
        if outcome.foreignUnfinished > 0 { bytes.append(0x0A) }
        for record in records { bytes.append(contentsOf: record.line) }
        // A rotation due after this append closes the file: it is fsynced at once then.
        let syncsNow = rotation.map { size + Int64(bytes.count) > Int64($0.maxBytes) } ?? false
        do {
            try Posix.writeAll(fd, bytes, path: path)
            if syncsNow { try Posix.fsync(fd, path: path) }
        } catch {
            // A short write may have left part of a line: cut it now rather than at the next start.
            try? Posix.truncate(fd, to: size, path: path)
            throw .system(error)
        }
        // Left to fsync: what to take back on failure is all since the last fsync (an earlier
        // deferred append not synced yet included); an fsync now covers every earlier one.
        unsynced = syncsNow ? nil : (fd, path, unsynced?.sizeBefore ?? size, unsynced.map { $0.givenBefore } ?? given)
        given = AppendCursor(device: info.device, inode: info.inode, size: size + Int64(bytes.count), seq: newLast, durable: syncsNow ? newLast : durable)
        lastAppended = (info.device, info.inode, given!.size, newLast, records.last!.line)
        // Noted before the writers' lock is let go: another process goes by the note alone, and
        // a note behind the file, once the file is moved away under another name than NAME.1,
        // would give it the records since again (only a crash may leave it behind).
        try saveGiven(given!)
        outcome.appended = records.count
        if let rotation, given!.size > Int64(rotation.maxBytes) {
            outcome.rotated = rotate(keep: rotation.keep) ?? ""
        }
        return outcome
    }

    /// The descriptor of the appends not flushed yet, if any.
    var unsyncedDescriptor: Int32? { unsynced?.fd }

    /// After `flush` returned: what this process remembers the file was given is durable through
    /// its appends too, as the note the flush leaves says (an append made as made, without the
    /// note read back, writes no less than the note knows).
    func flushed(_ flush: Flush) {
        guard var known = given, known.device == flush.given.device, known.inode == flush.given.inode else { return }
        known.durable = max(known.durable, min(flush.given.seq, known.seq))
        given = known
    }

    /// Appends handed to a flush (an fsync of the file, or a `syncfs` of its file system): what
    /// to note once it returned, and what to go back to if it fails.
    struct Flush {
        let path: String
        /// What the file was given through the last append handed over (the file: device, inode).
        let given: AppendCursor
        let sizeBefore: Int64
        let givenBefore: AppendCursor?
    }

    /// Hands the appends not flushed yet to a flush (the caller's, possibly on another thread);
    /// appends made meanwhile wait for the next one.
    func takeUnflushed() -> Flush? {
        guard let pending = unsynced, let given else { return nil }
        unsynced = nil
        return Flush(path: pending.path, given: given, sizeBefore: pending.sizeBefore, givenBefore: pending.givenBefore)
    }

    /// After a flush failed: its appends, and any made since, are taken back — under the
    /// writers' lock, while the path still names that file: cut to the size before them, what
    /// was given before restored — so that the next catch-up writes them again.
    static func takeBack(_ flush: Flush, lock: () throws(AgentError) -> Int32, saveGiven: (AppendCursor) throws(AgentError) -> Void) {
        guard let held = try? lock() else { return }
        defer { Posix.close(held) }
        guard let fd = try? Posix.open(flush.path, [.readWrite]) else { return }
        defer { Posix.close(fd) }
        // Never extended: a file already shorter was cut by another take-back (or a reader).
        guard let now = try? Posix.fileInfo(fd, path: flush.path), now.device == flush.given.device, now.inode == flush.given.inode,
              now.size > flush.sizeBefore else { return }
        try? Posix.truncate(fd, to: flush.sizeBefore, path: flush.path)
        // A file never given a record before (made by its first append) is given nothing now.
        try? saveGiven(flush.givenBefore ?? AppendCursor(device: flush.given.device, inode: flush.given.inode, size: flush.sizeBefore, seq: 0, durable: 0))
    }

    /// What an fsync of a flush's file alone did.
    enum AloneOutcome {
        case done
        case failed(SystemError)
        /// The path no longer names the file (moved away, deleted): nothing known.
        case gone
    }

    /// fsyncs the file a flush was about, when the path still names it.
    static func fsyncAlone(_ flush: Flush) -> AloneOutcome {
        guard let fd = try? Posix.open(flush.path, [.readOnly]) else { return .gone }
        defer { Posix.close(fd) }
        guard let now = try? Posix.fileInfo(fd, path: flush.path), now.device == flush.given.device, now.inode == flush.given.inode else { return .gone }
        do { try Posix.fsync(fd, path: flush.path) } catch { return .failed(error) }
        return .done
    }

    /// What to note once the file's appends through `flushed.seq` are on disk, given what the
    /// database says now (`loaded`; another process may have appended since): durable through
    /// them when it is still about that file. Nil: nothing to note.
    static func noteFlushed(_ flushed: AppendCursor, loaded: AppendCursor?) -> AppendCursor? {
        guard var now = loaded, now.device == flushed.device, now.inode == flushed.inode else { return nil }
        let durable = max(now.durable, min(flushed.seq, now.seq))
        guard durable != now.durable else { return nil }
        now.durable = durable
        return now
    }

    /// Rotates the file, under its lock, after an append took it past `maxBytes`: NAME.keep-1 →
    /// NAME.keep (the oldest dropped), …, NAME → NAME.1, and basket-sync's own parts past
    /// NAME.keep (left by a larger `keep` before) removed: `keep` parts, whatever `keep` was —
    /// anything else there (another account's file, a link, a directory) is left as it is and
    /// said by `status` (``partsLeftPastKeep(of:keep:)``). The next catch-up finds
    /// the path gone and starts a new file with the next record (what the database remembers
    /// names the rotated file). Renames and removals never follow a link. A failure is said, not
    /// thrown: the records are safe.
    private func rotate(keep: Int) -> String? {
        // Judged before anything moves: only basket-sync's own parts are moved along.
        if let blocker = JSONLinesFile.rotationBlocker(of: path, keep: keep) { return blocker }
        do {
            var past = keep + 1
            while past <= keep + 10_000, Posix.info("\(path).\(past)", follow: false) != nil { past += 1 }
            for index in stride(from: past - 1, through: keep + 1, by: -1) where JSONLinesFile.notOwnPart("\(path).\(index)") == nil { Posix.unlink("\(path).\(index)") }
            if keep > 1 {
                for index in stride(from: keep - 1, through: 1, by: -1) where Posix.info("\(path).\(index)", follow: false) != nil {
                    try Posix.rename("\(path).\(index)", "\(path).\(index + 1)")
                }
            }
            try Posix.rename(path, "\(path).1")
        } catch {
            return error.description
        }
        close()
        return nil
    }

    /// Why the rotation of the file at `path` cannot be done, if it cannot: a part it would move
    /// along (`PATH.1` … `PATH.keep`) that is not basket-sync's — not a regular file (a directory,
    /// a link, a FIFO), or another account's. Nothing is moved then, never an object of someone
    /// else's; the file grows until the part is moved away.
    /// Another account's: neither root's, this process's, nor the directory's owner's (the
    /// agent's account — `status` run by root judges the agent's parts as the agent does).
    static func rotationBlocker(of path: String, keep: Int) -> String? {
        for index in 1...max(1, keep) {
            let part = "\(path).\(index)"
            if let why = notOwnPart(part) {
                return "\(part): \(why), not a part basket-sync made: \(Posix.basename(of: path)) is not rotated (it grows past maxBytes) until it is moved away"
            }
        }
        return nil
    }

    /// Why the part at `part` is not one basket-sync made (nil when it is, or when nothing is
    /// there): not a regular file (a directory, a link, a FIFO), or another account's — neither
    /// root's, this process's, nor the directory's owner's.
    static func notOwnPart(_ part: String) -> String? {
        guard let info = Posix.info(part, follow: false) else { return nil }
        if info.kind != .regular { return "is \(info.kind.name)" }
        let ours: Set<UInt32> = [0, geteuid(), Posix.info(Posix.dirname(of: part), follow: true)?.owner ?? 0]
        return ours.contains(info.owner) ? nil : "is owned by \(Trust.account(info.owner))"
    }

    /// The names past `PATH.keep` that are not basket-sync's own parts, said one sentence each:
    /// rotation leaves them as they are (never another account's file removed, never a link's
    /// name); a person moves them away.
    static func partsLeftPastKeep(of path: String, keep: Int) -> [String] {
        var said: [String] = []
        var index = keep + 1
        while index <= keep + 10_000, Posix.info("\(path).\(index)", follow: false) != nil {
            if let why = notOwnPart("\(path).\(index)") { said.append("\(path).\(index): \(why), past keep (\(keep)): left as it is by rotation, which removes only its own parts there; move it away") }
            index += 1
        }
        return said
    }

    /// The refusal of a file with a hole: basket-sync only appends, so it never wrote one, and
    /// reading it would walk gigabytes of zeros (docs/spec.md §7: no file is read whole).
    static func sparse(_ path: String) -> SystemError {
        var error = SystemError(path: path, shape: FileInfo.Kind.regular.name)
        error.refusal = "holds a hole (a sparse file: bytes never written), which basket-sync never writes: not its file; move it away (the next record starts a new one)"
        return error
    }

    /// The parts rotation made of the file at `path`: `PATH.1`, `PATH.2`… while they exist (the
    /// newest first; compressed parts, `.gz`, are not read).
    static func rotatedParts(of path: String) -> [String] {
        var parts: [String] = []
        while parts.count < 10_000, Posix.info("\(path).\(parts.count + 1)", follow: false) != nil { parts.append("\(path).\(parts.count + 1)") }
        return parts
    }

    /// The seq of the file's first line when it is record-like (read from the first 4 KiB; nil
    /// when empty, missing or not one): where its records start.
    func firstSeq() -> UInt64? {
        guard let fd = try? Posix.open(path, [.readOnly]) else { return nil }
        defer { Posix.close(fd) }
        guard let head = try? read(fd, at: 0, count: 4096), !head.isEmpty else { return nil }
        let line = head.prefix { $0 != UInt8(ascii: "\n") }
        let seq = RecordFormat.seq(ofLine: Array(line.prefix(32)))
        return seq > 0 ? seq : nil
    }

    /// The seq of a whole record beyond `databaseSeq` in the file, past lines that are not
    /// records, read without writing (nil when none or unreadable): `status` reports it.
    func recordBeyond(databaseSeq: UInt64, isRecord: ([UInt8]) -> Bool) -> UInt64? {
        // A file that is still the one given, at the size given, holds no more than the database did.
        if let given, given.seq <= databaseSeq, isAsGiven(given) { return nil }
        guard let fd = try? Posix.open(path, [.readOnly]) else { return nil }
        defer { Posix.close(fd) }
        guard let info = try? Posix.fileInfo(fd, path: path), !Posix.hasHole(fd, size: info.size),
              let tail = try? readTail(fd, size: info.size) else { return nil }
        var found: UInt64?
        var later: UInt64?  // the seq of the record-like line seen just after (further down)
        try? linesBackward(fd, end: tail.completeSize) { (start, length) throws(AgentError) in
            let seq = RecordFormat.seq(ofLine: try read(fd, at: start, count: min(length, 32)))
            guard seq > 0 else { return true }
            if seq > databaseSeq, isRecord(try read(fd, at: start, count: length + 1)) { found = seq; return false }
            // Two lines in order: the file's records end here (a copy of an older line after them
            // is stepped over).
            if let later, seq < later { return false }
            later = seq
            return true
        }
        return found
    }

    /// The file's last whole record (with its newline), read backwards past lines that are not
    /// records, without following a link, and its file's information (who owns it, its mode);
    /// nil when there is none or the file cannot be read.
    func lastRecord(isRecord: ([UInt8]) -> Bool) -> (line: [UInt8], info: FileInfo)? {
        guard let fd = try? Posix.open(path, [.readOnly]) else { return nil }
        defer { Posix.close(fd) }
        guard let info = try? Posix.fileInfo(fd, path: path), info.kind == .regular, !Posix.hasHole(fd, size: info.size),
              let tail = try? readTail(fd, size: info.size) else { return nil }
        var found: [UInt8]?
        try? linesBackward(fd, end: tail.completeSize) { (start, length) throws(AgentError) in
            guard RecordFormat.seq(ofLine: try read(fd, at: start, count: min(length, 32))) > 0 else { return true }
            let line = try read(fd, at: start, count: length + 1)
            if isRecord(line) { found = line; return false }
            return true
        }
        return found.map { ($0, info) }
    }

    /// The file's unfinished last line (no newline): its first `limit` bytes at most, where the
    /// whole lines end, and the file's information; nil when it ends with a newline, is empty,
    /// has a hole or cannot be read. Read backwards in chunks: a long line costs time, never memory.
    func unfinishedLine(limit: Int) -> (start: [UInt8], completeSize: Int64, info: FileInfo)? {
        guard let fd = try? Posix.open(path, [.readOnly]) else { return nil }
        defer { Posix.close(fd) }
        guard let info = try? Posix.fileInfo(fd, path: path), info.kind == .regular, !Posix.hasHole(fd, size: info.size),
              let tail = try? readTail(fd, size: info.size), tail.completeSize < info.size,
              let start = try? read(fd, at: tail.completeSize, count: Int(min(info.size - tail.completeSize, Int64(limit)))) else { return nil }
        return (start, tail.completeSize, info)
    }

    /// The whole record lines after `seq` at the end of the file, in order (with their newline),
    /// read backwards until a record at or below `seq`: what a reader of the file has to take.
    func recordLines(after seq: UInt64, isRecord: ([UInt8]) -> Bool) -> [[UInt8]] {
        guard let fd = try? Posix.open(path, [.readOnly]) else { return [] }
        defer { Posix.close(fd) }
        guard let info = try? Posix.fileInfo(fd, path: path), !Posix.hasHole(fd, size: info.size),
              let tail = try? readTail(fd, size: info.size) else { return [] }
        var found: [[UInt8]] = []
        try? linesBackward(fd, end: tail.completeSize) { (start, length) throws(AgentError) in
            let lineSeq = RecordFormat.seq(ofLine: try read(fd, at: start, count: min(length, 32)))
            guard lineSeq > 0 else { return true }
            guard lineSeq > seq else { return false }
            let line = try read(fd, at: start, count: length + 1)
            if isRecord(line), found.last.map({ RecordFormat.seq(ofLine: $0) > lineSeq }) ?? true { found.append(line) }
            return true
        }
        return found.reversed()
    }

    /// Calls `visit` with the offset and length (without its newline) of each complete line
    /// before `end`, the last first, until it returns false. Every byte is read once: a long
    /// line costs its length, not its square.
    private func linesBackward(_ fd: Int32, end: Int64, _ visit: (Int64, Int) throws(AgentError) -> Bool) throws(AgentError) {
        var lineEnd = end - 1  // the newline that ends the current line
        var position = lineEnd
        let chunk: Int64 = 65_536
        while lineEnd >= 0 {
            var lineStart: Int64 = 0
            while position > 0 {
                let from = max(0, position - chunk)
                let bytes = try read(fd, at: from, count: Int(position - from))
                if let newline = bytes.lastIndex(of: 0x0A) {
                    lineStart = from + Int64(newline) + 1
                    break
                }
                position = from
            }
            guard try visit(lineStart, Int(lineEnd - lineStart)) else { return }
            lineEnd = lineStart - 1
            position = lineEnd
        }
    }

    /// Whether the file's last line — the record this process appended last, where `known` says
    /// the file ends — was written over in place since: the same file and the same size cannot
    /// tell (a line of the same length put over it); its bytes, one read, can. Unknown (the file
    /// given by another process, or not by an append): false, the file is taken as given.
    private func lastLineWrittenOver(_ known: AppendCursor, fd: Int32) throws(AgentError) -> Bool {
        guard let last = lastAppended, last.device == known.device, last.inode == known.inode, last.end == known.size,
              last.seq == known.seq else { return false }
        guard known.size >= Int64(last.line.count) else { return true }
        return try read(fd, at: known.size - Int64(last.line.count), count: last.line.count) != last.line
    }

    private func read(_ fd: Int32, at offset: Int64, count: Int) throws(AgentError) -> [UInt8] {
        do { return try Posix.read(fd, at: offset, count: count, path: path) } catch { throw .system(error) }
    }

    /// The size up to the end of the last complete line, and that line's seq (0 when none). Read
    /// backwards in chunks of a fixed size: a long last line costs time, never memory.
    /// Whether the `count` bytes at `offset` are the start of `line` (with its newline, as the
    /// database holds it), shorter than it: a record torn by a crash. A byte a power cut left
    /// zero counts as the record's.
    private func isTorn(_ fd: Int32, at offset: Int64, count: Int64, of line: [UInt8]?) throws(AgentError) -> Bool {
        guard let line, count < Int64(line.count) else { return false }
        return zip(try read(fd, at: offset, count: Int(count)), line).allSatisfy { $0 == $1 || $0 == 0 }
    }

    private func readTail(_ fd: Int32, size: Int64) throws(AgentError) -> (completeSize: Int64, lastSeq: UInt64) {
        guard size > 0 else { return (0, 0) }
        let chunk: Int64 = 65_536
        /// The offset of the last newline before `end`, if any.
        func newline(before end: Int64) throws(AgentError) -> Int64? {
            var position = end
            while position > 0 {
                let from = max(0, position - chunk)
                let bytes = try read(fd, at: from, count: Int(position - from))
                if let index = bytes.lastIndex(of: 0x0A) { return from + Int64(index) }
                position = from
            }
            return nil
        }
        guard let last = try newline(before: size) else { return (0, 0) }
        let start = try newline(before: last).map { $0 + 1 } ?? 0
        return (last + 1, RecordFormat.seq(ofLine: try read(fd, at: start, count: Int(min(last - start, 32)))))
    }
}
