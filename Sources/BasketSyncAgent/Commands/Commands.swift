import BasketSyncWire

/// The commands, one file each, callable from the executable and from tests. Each returns what it
/// did; its `human` and `json` forms are what the executable prints.
public enum Commands {}

extension Commands {
    /// Checks an id given on the command line as the agent checks the ids it reads: a usage
    /// error (64) names it, escaped and cut, and says what is wrong.
    static func checkIdentifier(_ text: String, _ what: String, limits: InputLimits) throws(AgentError) {
        if let reason = Identifier.problem(text, limits: limits) {
            throw .usage("\(what) \(JSONWriter.quoted(text)) \(reason)")
        }
    }
}
