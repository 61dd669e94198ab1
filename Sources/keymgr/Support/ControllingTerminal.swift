import Foundation
import KeyManager

/// The person's terminal, for prompts: `/dev/tty` when keymgr runs directly; in the agent's worker, the terminal
/// the client passed with its request (the worker has no terminal of its own, and /dev/tty there would be the
/// agent's).
enum ControllingTerminal {
    /// A descriptor of the terminal that the caller closes (`close`), or -1 when there is none: the request's
    /// (`RequestContext.terminal`) when the agent serves it.
    static func open(flags: Int32) -> Int32 {
        let request = ServedRequest.context
        if request.isServed {
            guard let passed = request.terminal, passed >= 0 else { return -1 }
            return fcntl(passed, F_DUPFD_CLOEXEC, 3)
        }
        return Foundation.open("/dev/tty", flags | O_CLOEXEC)
    }
}

/// Files named by options (`--metadata`, `--initial-access-token-file`, …) and descriptors named by options
/// (`--pin-fd`, `--password-fd`), read for the person who asked.
///
/// In the agent's worker the process may read more than its caller (the store's owner, or root): a file is read
/// only if the caller may read it — checked with fstat on the descriptor opened, so a path swapped after the check
/// cannot slip through — and a descriptor number only if the client passed that descriptor (a number it did not
/// pass may be one of the worker's own).
enum CallerFiles {
    nonisolated(unsafe) private static var passedDescriptors: Set<Int32>?

    /// In the worker: the descriptor numbers the client passed.
    static func serve(passed descriptors: Set<Int32>) { passedDescriptors = descriptors }

    /// `descriptor` if the command may read it, else -1 (reading it then fails with EBADF, as for a closed one).
    static func descriptor(_ descriptor: Int32) -> Int32 {
        guard let passedDescriptors else { return descriptor }
        return passedDescriptors.contains(descriptor) ? descriptor : -1
    }

    /// The whole of a small file named by an option, or `badInput` (65) when it is missing, unreadable, or (in the
    /// agent) not readable by the caller.
    static func read(_ path: String, what: String) throws -> Data {
        let descriptor = try openForCaller(path, what: what)
        defer { close(descriptor) }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: false)
        guard let data = try? handle.readToEnd() else { return Data() }
        return data
    }

    /// In the agent: fails unless the caller may read the file at `path` (a file named now that the agent reads
    /// later, such as `server set --credential-file`). Run directly: nothing to check.
    static func checkCallerMayRead(_ path: String, what: String) throws {
        guard AgentCaller.current != nil else { return }
        close(try openForCaller(path, what: what))
    }

    /// `path` opened for reading (blocking), after checking on the descriptor that the caller may read it.
    private static func openForCaller(_ path: String, what: String) throws -> Int32 {
        let unreadable = CommandFailure(.badInput, "cannot read \(what) from \(path): check it exists and is readable")
        if AgentCaller.current != nil, !path.hasPrefix("/") {
            // The worker's working directory is the agent's, not the person's.
            throw CommandFailure(.badInput, "\(what): give \(path) as an absolute path (the agent does not know your working directory)")
        }
        // O_NONBLOCK: opening a FIFO must not wait for a writer before the check.
        let descriptor = Foundation.open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
        guard descriptor >= 0 else { throw unreadable }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            close(descriptor)
            throw unreadable
        }
        if let caller = AgentCaller.current,
           !caller.mayRead(owner: info.st_uid, group: info.st_gid, mode: UInt32(info.st_mode))
            || !mayReach(descriptor, caller: caller) {
            close(descriptor)
            throw CommandFailure(.badInput, "cannot read \(what) from \(path): you (\(caller.login)) may not read it")
        }
        _ = fcntl(descriptor, F_SETFL, 0)
        return descriptor
    }

    /// Whether `caller` may search every directory above the file opened as `descriptor` (its path as the kernel
    /// resolved it): a readable file inside a directory closed to the caller is not theirs to name.
    private static func mayReach(_ descriptor: Int32, caller: AgentCaller) -> Bool {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink("/proc/self/fd/\(descriptor)", &buffer, buffer.count - 1)
        guard length > 0 else { return false }
        var directory = String(decoding: buffer.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        while let slash = directory.lastIndex(of: "/") {
            directory = slash == directory.startIndex ? "/" : String(directory[..<slash])
            var info = stat()
            guard stat(directory, &info) == 0,
                  caller.maySearch(owner: info.st_uid, group: info.st_gid, mode: UInt32(info.st_mode)) else { return false }
            if directory == "/" { break }
        }
        return true
    }
}
