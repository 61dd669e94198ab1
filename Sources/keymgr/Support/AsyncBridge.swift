import Dispatch
import KeyManager
import Synchronization

/// Runs async library work from keymgr's synchronous commands and waits for its result.
///
/// The work runs in a detached task on the global executor while the calling thread blocks on a semaphore,
/// which is safe here: the caller is the process's main thread, never one of the cooperative pool's.
///
/// The task's priority is `.medium`, said so: left to itself, a task started from the main thread on Linux takes the
/// thread's priority, user-initiated, and libdispatch then gives the pool thread that runs it a nice value of -2
/// (`setpriority`). An unprivileged process may not raise its priority, so under the agent's unit (User=keymgr, no
/// capabilities) each request that touched the network logged "Failed to set thread priority for worker thread …
/// errno=13". Medium is nice 0, the process's own: nothing to refuse, and nothing for keymgr to gain from more.
enum AsyncBridge {
    static func wait<Value: Sendable>(_ work: @escaping @Sendable () async throws -> Value) throws -> Value {
        let outcome = Outcome<Value>()
        let done = DispatchSemaphore(value: 0)
        Task.detached(priority: .medium) {
            let result: Result<Value, any Error>
            do {
                result = .success(try await work())
            } catch {
                result = .failure(error)
            }
            outcome.result.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        guard let result = outcome.result.withLock({ $0 }) else {
            throw CommandFailure(.failure, "internal error: a task ended without a result")
        }
        return try result.get()
    }

    /// Where the task leaves its result for the waiting thread.
    private final class Outcome<Value: Sendable>: Sendable {
        let result = Mutex<Result<Value, any Error>?>(nil)
    }
}
