import BasketSyncWire

extension AgentConfiguration {
    /// Reads `basket-sync.json` in `directory`; a missing file means every default.
    public static func load(directory: String) throws(AgentError) -> AgentConfiguration {
        let path = "\(directory)/\(fileName)"
        guard let bytes = try Posix.readFile(path, limit: maximumFileBytes) else { return AgentConfiguration() }
        return try parse(bytes, path: path)
    }

    /// Parses a configuration file's bytes; a problem names `path:line:column`.
    static func parse(_ bytes: [UInt8], path: String) throws(AgentError) -> AgentConfiguration {
        do { return try parse(bytes) } catch {
            let (line, column) = lineAndColumn(of: error.offset, in: bytes)
            throw .configuration(path: path, line: line, column: column, reason: error.reason)
        }
    }
}
