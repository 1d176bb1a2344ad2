/// What the appends of a group of carts leave to the group's end: each cart's writers' lock
/// (`projections.lock`, its byte), held from the cart's first catch-up until the notes of what
/// its files were given are in the database, and those notes — written in one transaction for
/// the group rather than one for each cart. The rule is kept: a file's note is in the database
/// before its writers' lock is let go (see ``JSONLinesFile/catchUp``).
///
/// The locks are taken one at a time, in the group's order, on the database's one descriptor
/// (open-file-description locks: a lock held is held once). No other process waits for a
/// second writers' lock while it holds one, and none is held while the group's transaction
/// waits for the database, so two holders cannot wait for each other.
final class HeldNotes {
    /// The most carts whose notes wait for one transaction: a kill of the agent between their
    /// appends and that transaction leaves their notes one append behind (a catch-up then reads
    /// each file's end; a file the host moved away meanwhile under another name than `NAME.1`,
    /// or deleted, is given those records again) — at most this many carts', where a note
    /// written after each append left one cart's.
    static let cartsAtMost = 8

    private var locks: [ObjectIdentifier: (store: Store, fd: Int32)] = [:]
    /// The order the locks were taken in.
    private var order: [ObjectIdentifier] = []
    private var notes: [(store: Store, projection: Projection, given: AppendCursor)] = []

    /// `store`'s writers' lock, taken unless the group holds it already (waiting for it at most
    /// `waitingAtMost` seconds: see ``Store/lockProjections(waitingAtMost:)``).
    func lock(_ store: Store, waitingAtMost: Double) throws(AgentError) -> Int32 {
        let key = ObjectIdentifier(store)
        if let held = locks[key] { return held.fd }
        let fd = try store.lockProjections(waitingAtMost: waitingAtMost)
        locks[key] = (store, fd)
        order.append(key)
        return fd
    }

    /// Keeps what `store`'s file `projection` was given, for the group's transaction (a later
    /// note of the same file replaces it).
    func note(_ store: Store, _ projection: Projection, _ given: AppendCursor) {
        notes.removeAll { $0.store === store && $0.projection == projection }
        notes.append((store, projection, given))
    }

    /// Writes the notes kept in one transaction without an fsync of its own (as each cart's
    /// would have been), then lets every lock go. A failure is returned: the notes are then
    /// behind their files, as after a crash between an append and its note, and the next
    /// catch-up of each file reads its tail.
    func finish() -> AgentError? {
        defer {
            for key in order { if let (store, fd) = locks[key] { store.unlockProjections(fd) } }
            locks = [:]
            order = []
            notes = []
        }
        guard let any = notes.first?.store else { return nil }
        do {
            try any.withQuickTransaction { () throws(AgentError) in
                for (store, projection, given) in notes { try store.noteGiven(projection, given) }
            }
            return nil
        } catch {
            return error
        }
    }
}
