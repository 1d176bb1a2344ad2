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
    static func recordBeyond(_ projection: Projection, in directory: String, databaseSeq: UInt64, file: JSONLinesFile? = nil) -> UInt64? {
        let path = "\(directory)/\(projection.fileName)"
        let live = (file ?? JSONLinesFile(path: path)).recordBeyond(databaseSeq: databaseSeq, isRecord: projection.isRecord)
        let parts = JSONLinesFile.rotatedParts(of: path).compactMap { JSONLinesFile(path: $0).recordBeyond(databaseSeq: databaseSeq, isRecord: projection.isRecord) }.max()
        return [live, parts].compactMap { $0 }.max()
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
        _ directory: String, files: [Projection: JSONLinesFile] = [:],
        skip: (Projection, UInt64) throws(AgentError) -> Bool = { _, _ in false },
        lastSeq: (Projection) throws(AgentError) -> UInt64
    ) throws(AgentError) {
        for projection in Projection.allCases {
            let databaseSeq = try lastSeq(projection)
            if try skip(projection, databaseSeq) { continue }
            guard let seq = recordBeyond(projection, in: directory, databaseSeq: databaseSeq, file: files[projection]) else { continue }
            let databaseNow = try lastSeq(projection)
            if seq > databaseNow {
                throw .databaseBehind(path: "\(directory)/\(projection.fileName)", fileSeq: seq, databaseSeq: databaseNow)
            }
        }
    }


}
