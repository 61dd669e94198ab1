import Foundation

/// Process-wide protections of secrets in memory.
public enum ProcessHardening {
    /// Turns core dumps off for this process (`RLIMIT_CORE` 0 and `prctl(PR_SET_DUMPABLE, 0)`), so a crash while a
    /// master key, PIN or private key is in memory writes no core file, and other processes of the same user
    /// cannot ptrace it or read its memory through /proc. Call first thing in a process that handles secrets.
    public static func disableCoreDumps() {
        var none = rlimit(rlim_cur: 0, rlim_max: 0)
        _ = setrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &none)
        // prctl is variadic in C, which Swift cannot call directly: look it up with its fixed five-argument shape.
        typealias PRCTL = @convention(c) (Int32, UInt, UInt, UInt, UInt) -> Int32
        if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "prctl") {
            _ = unsafeBitCast(symbol, to: PRCTL.self)(4 /* PR_SET_DUMPABLE */, 0, 0, 0, 0)
        }
    }
}
