/// The commands, one file each, callable from the executable and from tests. Each returns what it
/// did; its `human` and `json` forms are what the executable prints.
public enum Commands {}
