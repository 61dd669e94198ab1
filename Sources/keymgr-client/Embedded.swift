import AgentWire
import Glibc

/// Embedded mode: the full program, `keymgr-core`, runs the command in this process (execv, same argv).
enum Embedded {
    /// Where keymgr-core is: beside this executable (a build directory, or a bin directory with both), else in
    /// `<dir>/../libexec/keymgr/` (the installed layout).
    static func candidates() -> [String] {
        guard let executable = selfPath() else { return [] }
        let directory = executable.split(separator: "/", omittingEmptySubsequences: false).dropLast()
            .joined(separator: "/")
        return [directory + "/keymgr-core", directory + "/../libexec/keymgr/keymgr-core"]
    }

    /// Replaces this process with keymgr-core; returns only to exit 1 when no candidate could be run.
    static func run() -> Never {
        let places = candidates()
        var lastError: Int32 = ENOENT
        for path in places {
            execv(path, CommandLine.unsafeArgv)
            lastError = errno
        }
        let json = ArgumentScan(CommandLine.arguments.dropFirst()).has("--json")
        ClientFailure.report(code: "failure",
            message: "cannot run keymgr-core (looked for \(places.joined(separator: " and "))): "
                + String(cString: strerror(lastError)) + ": reinstall keymgr (make install puts it in "
                + "PREFIX/libexec/keymgr/)", json: json)
        exit(1)
    }

    /// This executable's path, from /proc/self/exe.
    private static func selfPath() -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard length > 0 else { return nil }
        return String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
