import Glibc

/// An exclusive lock on a file, held until `release()` (or until this object goes, or the process ends: the kernel
/// releases it then, so a killed holder never blocks the next). The one lock keymgr takes across processes: the sync
/// lease, each user's OAuth credentials, a master-key rotation, a shared swtpm.
///
/// `whole` is an `flock` of the whole file; `byte(n)` an open-file-description lock (`F_OFD_SETLK`) on byte `n`
/// alone, so one file serves many independent locks. Both belong to the open file, not to the process: two
/// `FileLock`s on one file in one process exclude each other, and closing the descriptor releases the lock.
package final class FileLock {
    /// What of the file the lock covers.
    package enum Region: Sendable {
        case whole
        case byte(Int)
    }

    private var descriptor: Int32
    private let region: Region

    /// Opens `path` (a file, made 0600 when missing; or, with `directory`, an existing directory); locks nothing yet.
    /// - Parameter cannotOpen: the error to throw, given the system's reason, when `path` cannot be opened.
    package init(path: String, region: Region = .whole, directory: Bool = false,
                 cannotOpen: (String) -> any Error) throws {
        self.region = region
        descriptor = directory ? open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw cannotOpen(String(cString: strerror(errno))) }
    }

    /// Takes the lock if it is free (true), or returns false at once when another holder has it.
    /// - Parameter cannotLock: the error to throw, given the system's reason, for any other failure.
    package func tryLock(cannotLock: (String) -> any Error) throws -> Bool {
        let taken: Bool
        switch region {
        case .whole:
            taken = flock(descriptor, LOCK_EX | LOCK_NB) == 0
        case .byte(let offset):
            var span = Glibc.flock(l_type: Int16(F_WRLCK), l_whence: Int16(SEEK_SET), l_start: offset, l_len: 1, l_pid: 0)
            taken = fcntl(descriptor, Self.setOFDLock, &span) == 0
        }
        if taken { return true }
        let reason = errno
        guard reason == EWOULDBLOCK || reason == EAGAIN || reason == EACCES || reason == EINTR else {
            throw cannotLock(String(cString: strerror(reason)))
        }
        return false
    }

    /// Waits for the whole-file lock as long as it takes (for operations that are short by nature).
    package func lock() {
        while flock(descriptor, LOCK_EX) != 0 && errno == EINTR {}
    }

    /// Gives the lock back (closing the descriptor releases it).
    package func release() {
        guard descriptor >= 0 else { return }
        close(descriptor)
        descriptor = -1
    }

    deinit { release() }

    /// `F_OFD_SETLK` (`fcntl.h`; Glibc does not export it to Swift).
    private static let setOFDLock: Int32 = 37
}
