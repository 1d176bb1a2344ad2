import BasketSync
import BasketSyncWire

/// Every check that the database is the truth and that its loss is seen, never papered over
/// (docs/spec.md §7): a JSON Lines file (or one of its rotated parts) that holds a whole record
/// the database does not. The agent, the commands, `init`, `status` and a tree's new carts all
/// ask here.
enum Integrity {
    /// The highest seq of a whole record beyond `databaseSeq` in `projection`'s file of
    /// `directory` or in its rotated parts (nil when none): records rotated away are records all
    /// the same. `file` reads the live file through a descriptor its caller keeps open.
    static func recordBeyond(_ projection: Projection, in directory: String, databaseSeq: UInt64, file: JSONLinesFile? = nil, syncId: String? = nil) -> UInt64? {
        beyond(projection, in: directory, databaseSeq: databaseSeq, file: file, syncId: syncId).seq
    }

    /// The file holding the highest record beyond the database (the live file or a rotated part
    /// in order), and that record's seq.
    static func fileBeyond(_ projection: Projection, in directory: String, databaseSeq: UInt64, syncId: String? = nil) -> (path: String, seq: UInt64)? {
        let found = beyond(projection, in: directory, databaseSeq: databaseSeq, syncId: syncId)
        guard let seq = found.seq else { return nil }
        return (found.path, seq)
    }

    /// A record beyond the database in `projection`'s files: its seq (the live file, or a rotated
    /// part in order with the files newer than it), and the rotated parts that hold one out of
    /// order — a part is older than the files before it, so a record in it at or above the first
    /// record of a newer file was never one of basket-sync's there (a forged or foreign file): it
    /// says nothing of the database, and is named, never taken for a database behind.
    /// With `syncId`, an outbox line of another sync id (another cart's) is no record here — asked
    /// only of a file that was given records before: a directory new to a tree that holds records
    /// copied in is given back for `init --adopt`, whatever their sync id.
    static func beyond(_ projection: Projection, in directory: String, databaseSeq: UInt64, file: JSONLinesFile? = nil, syncId: String? = nil) -> (seq: UInt64?, path: String, foreign: [String]) {
        let isRecord = { (line: [UInt8]) in projection.isRecord(line, of: syncId) }
        let path = "\(directory)/\(projection.fileName)"
        let liveFile = file ?? JSONLinesFile(path: path)
        var foreign: [String] = []
        /// A record beyond the database in `file`, of this directory; one of another sync id is
        /// named, and so is a file of another account's (basket-sync writes only its own).
        func ownBeyond(_ file: JSONLinesFile, _ shown: String) -> UInt64? {
            if let info = Posix.info(shown, follow: false), info.kind == .regular, let reason = Trust.foreignOutput(info) {
                if file.recordBeyond(databaseSeq: databaseSeq, isRecord: projection.isRecord) != nil {
                    foreign.append("\(shown): \(reason) — the database is not behind")
                }
                return nil
            }
            if let seq = file.recordBeyond(databaseSeq: databaseSeq, isRecord: isRecord) { return seq }
            if syncId != nil, let seq = file.recordBeyond(databaseSeq: databaseSeq, isRecord: projection.isRecord) {
                foreign.append("\(shown): holds record \(seq) of another sync directory (its id is not this one's): not basket-sync's here (another cart's file moved in, a forged one); move it away — the database is not behind")
            }
            return nil
        }
        // A live file that is not there holds nothing (its rotated parts are still read).
        let live = Posix.info(path, follow: false) != nil
        var found = live ? ownBeyond(liveFile, path) : nil
        var foundIn = path
        var newerFirst = (live ? liveFile.firstSeq() : nil, projection.fileName)
        for part in JSONLinesFile.rotatedParts(of: path) {
            let partFile = JSONLinesFile(path: part)
            if let seq = ownBeyond(partFile, part) {
                if let first = newerFirst.0, seq >= first {
                    foreign.append("\(part): holds record \(seq), not older than the first record of \(newerFirst.1) (\(first)) as a rotated part is: not basket-sync's (forged, or another directory's); move it away — the database is not behind")
                } else if seq > found ?? 0 {
                    found = seq
                    foundIn = part
                }
            }
            if let first = partFile.firstSeq(), first < (newerFirst.0 ?? .max) { newerFirst = (first, Posix.basename(of: part)) }
        }
        return (found, foundIn, foreign)
    }

    /// The rotated parts of `directory`'s files holding records out of order (see
    /// ``beyond(_:in:databaseSeq:file:)``), said one sentence each.
    static func foreignParts(in directory: String, syncId: (Projection) -> String? = { _ in nil }, databaseSeq: (Projection) -> UInt64) -> [String] {
        Projection.allCases.flatMap { beyond($0, in: directory, databaseSeq: databaseSeq($0), syncId: syncId($0)).foreign }
    }

    /// What records `directory`'s files hold, as "outbox.jsonl up to 12", one per projection that
    /// holds any: a directory without a database that holds records lost its database.
    static func recordsHeld(in directory: String) -> [String] {
        Projection.allCases.compactMap { projection in
            recordBeyond(projection, in: directory, databaseSeq: 0).map { "\(projection.fileName) up to \($0)" }
        }
    }

    /// Refuses (74) when a file of `directory` holds a whole record beyond what the database
    /// holds (`lastSeq`): it was lost, restored or replaced. `lastSeq` is asked again before the
    /// refusal: a record is committed before it is appended, so a record another process
    /// appended between the two reads is in the database by then, unless it really is behind.
    /// `skip` passes over a projection known to be in step (its file as it was given).
    static func checkNotBehind(
        _ directory: String, files: [Projection: JSONLinesFile] = [:], syncId: (Projection) throws(AgentError) -> String? = { _ in nil },
        skip: (Projection, UInt64) throws(AgentError) -> Bool = { _, _ in false },
        lastSeq: (Projection) throws(AgentError) -> UInt64
    ) throws(AgentError) {
        for projection in Projection.allCases {
            let databaseSeq = try lastSeq(projection)
            if try skip(projection, databaseSeq) { continue }
            guard let seq = recordBeyond(projection, in: directory, databaseSeq: databaseSeq, file: files[projection], syncId: try syncId(projection)) else { continue }
            let databaseNow = try lastSeq(projection)
            if seq > databaseNow {
                throw .databaseBehind(path: "\(directory)/\(projection.fileName)", fileSeq: seq, databaseSeq: databaseNow)
            }
        }
    }


}
