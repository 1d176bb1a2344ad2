import BasketSyncWire

extension Commands {
    /// `init`: creates the sync directory, its inbox, its database and a commented configuration.
    /// Idempotent: what exists is kept. Returns what was created, one line each.
    public static func initialize(directory: String) throws(AgentError) -> [String] {
        var created: [String] = []
        if !Posix.isDirectory(directory) {
            try Posix.makeDirectoryTree(directory)
            created.append(directory)
        }
        for folder in ["tmp", "new", "cur", "bad"] where !Posix.isDirectory("\(directory)/inbox/\(folder)") {
            try Posix.makeDirectoryTree("\(directory)/inbox/\(folder)")
            created.append("\(directory)/inbox/\(folder)/")
        }
        let configuration = "\(directory)/\(AgentConfiguration.fileName)"
        if !Posix.exists(configuration) {
            do { try Posix.writeFileAtomically(configuration, Array(AgentConfiguration.defaultFileText.utf8)) } catch {
                throw .system(error)
            }
            created.append(configuration)
        }
        let database = "\(directory)/\(Store.stateDirectoryName)/\(Store.databaseName)"
        let isNew = !Posix.exists(database)
        _ = try Store(directory: directory, create: true)
        if isNew { created.append(database) }
        return created
    }
}
