import BasketSyncWire

/// Every name basket-sync gives in a sync directory or a tree (docs/spec.md §3, §8): one place to
/// read the layout, and to change a name.
enum Layout {
    /// The configuration, the user's: `basket-sync.json`.
    static let configuration = AgentConfiguration.fileName
    /// The private state directory: `.basket-sync/`, the database and the locks and signals beside it.
    static let stateDirectory = ".basket-sync"
    /// The SQLite database in the state directory (with its `-wal` and `-shm`).
    static let database = "state.db"
    /// Touched in the state directory by a process after it commits, so that a running agent of
    /// a sync directory wakes without polling.
    static let commitSignal = "committed"
    /// The lock a running agent holds in the state directory, with its pid.
    static let agentLock = "agent.lock"
    /// The writers' lock of the JSON Lines files, in the state directory: the files themselves
    /// are never locked (a reader could hold their lock for ever).
    static let projectionsLock = "projections.lock"
    /// The marker in each cart directory of a tree: the cart's sync id. Touched after a commit by
    /// a one-shot command, to wake the agent.
    static let cartMarker = ".basket-sync-cart"
    /// The Maildir the Mealz side delivers into, and its folders.
    static let inbox = "inbox"
    static let inboxFolders = ["tmp", "new", "cur", "bad"]
    /// The JSON Lines files: the projections of the database (``Projection/fileName``).
    static let projections = Projection.allCases.map(\.fileName)
}
