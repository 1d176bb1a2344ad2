import BasketSyncWire

extension Commands {
    /// `lock [--timeout S] -- CMD ARG…`: runs CMD (an argv, no shell) holding the host's cart
    /// lock, waiting up to `timeout` seconds for it (nil: as long as it takes; then 75), and
    /// returns its exit status. CMD gets the lock as descriptors 3 (the lock file) and 4 (the
    /// sync directory): a process it leaves running keeps the lock until it ends or closes them.
    public static func lock(directory: String, timeout: Double?, command: [String]) throws(AgentError) -> Int32 {
        if case .treeRoot = Workspace.of(directory) {
            throw .usage("\(directory): is a tree of carts; the cart lock is one cart's: basket-sync -C \(directory)/CART-ID lock -- CMD")
        }
        let configuration = try AgentConfiguration.load(directory: directory)
        // A sync directory (or a tree's) as every command wants one: a lock in any other folder
        // would be one apply never takes.
        switch Workspace.of(directory) {
        case let .treeCart(root, id):
            // Only this id's cart: a folder holding another cart's marker (folders swapped) or
            // records of no cart of the tree is refused as every command refuses it — the lock
            // would guard the other shopper's cart. One not adopted yet may be locked.
            let tree = try Tree(root: root, readOnly: true)
            do { _ = try tree.cartStore(id, create: false, readOnly: true) } catch {
                if case .refused = error { throw error }
            }
        default: _ = try Database(directory: directory, create: false, readOnly: true)
        }
        if let why = Posix.whyNotRunnable(command[0]) {
            throw .missingInput("cannot run \(JSONWriter.cut(command[0])): \(why); give a command on the PATH or a path to one (with -C, a relative path is relative to the sync directory)")
        }
        let (reached, folder) = try CartFolder.reach(directory)
        let taken = try CartLock.take(directory: reached, configuration: configuration, timeout: timeout, waiting: { path, holders in
            Terminal.emit("basket-sync: \(PinnedNames.named(path)): waiting for the host's cart lock, held\(CartLock.describe(holders))", to: .error)
        })
        // Without `orNoFolder`, a missing folder is an error and never nil.
        guard let held = taken else { throw .missingInput("\(directory): the cart's folder does not exist") }
        defer { held.close() }
        withExtendedLifetime(folder) {}
        do { return try Posix.spawnAndWait(command, passing: held.file, alsoPassing: held.directory) } catch {
            throw .system(error)
        }
    }
}
