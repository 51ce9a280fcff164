//! The LSTM stack of ELMo's biLM (Peters et al. 2018, §3.1): layers of LSTMP where layer `i` reads
//! layer `i - 1`'s output and, from layer 1 on, adds its input to its output (bilm-tf's
//! `ResidualWrapper` inside `DropoutWrapper`, AllenNLP's `ElmoLstm`), and the two directions run
//! side by side. The one home of these rules: inference ([`crate::BiLm`]), autodiff training and
//! the hand-written backpropagation through time of elmo-train walk their stacks with
//! [`run_stack`] / [`residual_input_gradient`] and pair directions with [`both_directions`].

use burn::tensor::Tensor;

/// Whether layer `index` of a stack adds its input to its output.
pub fn has_residual(index: usize, use_skip_connections: bool) -> bool {
    index > 0 && use_skip_connections
}

/// What one layer of a stack did: the input it read (after any dropout the caller applies), its
/// LSTM output, and whatever the caller keeps of it (a final state, a tape for the backward pass).
///
/// # Shapes
/// - input: `[B, T, d_input]`
/// - output: `[B, T, P]`
pub struct LayerRun<R> {
    /// The input the layer read.
    pub input: Tensor<3>,
    /// Its LSTM output, before the residual.
    pub output: Tensor<3>,
    /// The caller's record of the layer.
    pub record: R,
}

/// A stack's outputs and the records of its layers (bottom first).
///
/// # Shapes
/// - outputs: per layer `[B, T, P]`, after the residual (what the next layer reads); empty
///   unless asked for
/// - top: `[B, T, P]`, the last layer's output (the stack's input when it has no layer)
pub struct StackRun<R> {
    /// Every layer's output after its residual, when [`run_stack`] was asked to keep them.
    pub outputs: Vec<Tensor<3>>,
    /// The top of the stack.
    pub top: Tensor<3>,
    /// Every layer's record.
    pub records: Vec<R>,
}

/// Runs a stack of `n_layers` layers over `input`: `layer(i, x)` runs layer `i` on `x` (the
/// previous layer's output after its residual) and tells what it read and produced; the residual
/// (from layer 1 on, when `use_skip_connections`) adds what it read to what it produced. With
/// `keep_outputs` every layer's output is kept (inference reads them all); otherwise only the
/// top, so that a backend can reuse the others' memory.
pub fn run_stack<R>(
    n_layers: usize,
    use_skip_connections: bool,
    input: Tensor<3>,
    keep_outputs: bool,
    mut layer: impl FnMut(usize, Tensor<3>) -> LayerRun<R>,
) -> StackRun<R> {
    let mut x = input;
    let mut outputs = Vec::with_capacity(n_layers);
    let mut records = Vec::with_capacity(n_layers);
    for index in 0..n_layers {
        let run = layer(index, x);
        x = if has_residual(index, use_skip_connections) {
            run.output + run.input
        } else {
            run.output
        };
        if keep_outputs {
            outputs.push(x.clone());
        }
        records.push(run.record);
    }
    StackRun {
        outputs,
        top: x,
        records,
    }
}

/// The gradient of layer `index`'s input, from the gradient that reached it through the layer's
/// LSTM (`through_layer`) and the gradient of the layer's output after the residual
/// (`of_output`): the residual passes `of_output` to the input unchanged.
///
/// # Shapes
/// - through_layer, of_output, output: `[B, T, P]`
pub fn residual_input_gradient(
    index: usize,
    use_skip_connections: bool,
    through_layer: Tensor<3>,
    of_output: Tensor<3>,
) -> Tensor<3> {
    if has_residual(index, use_skip_connections) {
        through_layer + of_output
    } else {
        through_layer
    }
}

/// Runs the forward direction's work on this thread and the backward direction's on a scoped
/// second thread, and returns both results (forward first). On a CPU the products of one
/// small-batch step do not keep two cores busy on their own; on a GPU the two directions' launches
/// interleave.
///
/// A tensor that both closures read must outlive the call: borrow it into them, do not move a
/// clone into each. On a CubeCL device each thread queues its kernels on a stream of its own, and
/// burn overwrites a buffer in place when its tensor holds the last handle to it (cubecl's
/// `can_mut` counts handles, not streams). So once one thread has dropped its clone, the other
/// may overwrite the buffer while the first thread's reads of it are still queued: on lavapipe,
/// a sentence batch's loss with dropout, whose two stacks read the same token embeddings, took
/// one of three values from call to call.
///
/// With `autodiff` (the closures record burn-autodiff's graph) both run on this thread, one after
/// the other. burn-autodiff 0.22 is not safe to record from two threads: `register` picks a
/// node's graph under the locator's lock, releases it and only then locks that graph, so a merge
/// on the other thread in between can move the graph's steps away and the node's step lands in
/// an orphaned graph; the backward pass then stops with "graph tape has already been consumed"
/// (elmo-train's `training` tests: 2 failing runs of the file in about 30). They do too where
/// rayon's pool has one thread (the application asked for one, e.g. `RAYON_NUM_THREADS=1`), so
/// that the run keeps to one core.
pub fn both_directions<T: Send>(
    autodiff: bool,
    forward: impl FnOnce() -> T + Send,
    backward: impl FnOnce() -> T + Send,
) -> (T, T) {
    if autodiff || elmo_kernels::host_threads() == 1 {
        let forward = forward();
        return (forward, backward());
    }
    std::thread::scope(|scope| {
        let backward = scope.spawn(backward);
        let forward = forward();
        match backward.join() {
            Ok(backward) => (forward, backward),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Tensor, TensorData};

    use super::*;

    fn constant(value: f32, device: &Device) -> Tensor<3> {
        Tensor::from_data(TensorData::new(vec![value; 2], [1, 1, 2]), device)
    }

    fn values(x: &Tensor<3>) -> Vec<f32> {
        x.clone().into_data().try_to_vec().unwrap()
    }

    #[test]
    fn the_residual_starts_at_layer_one_and_adds_what_the_layer_read() {
        let device = Device::flex();
        // Each "layer" doubles its input after adding 1 (standing in for dropout) to it.
        let layer = |_: usize, x: Tensor<3>| {
            let input = x + 1.0;
            LayerRun {
                output: input.clone() * 2.0,
                input,
                record: (),
            }
        };
        let with = run_stack(3, true, constant(1.0, &device), true, layer);
        // 1 → (2)·2 = 4 → (5)·2 + 5 = 15 → (16)·2 + 16 = 48.
        let outputs: Vec<f32> = with.outputs.iter().map(|o| values(o)[0]).collect();
        assert_eq!(outputs, [4.0, 15.0, 48.0]);
        assert_eq!(values(&with.top)[0], 48.0);
        let without = run_stack(3, false, constant(1.0, &device), false, layer);
        // 1 → 4 → 10 → 22, and only the top kept.
        assert_eq!(values(&without.top)[0], 22.0);
        assert!(without.outputs.is_empty());
        let empty = run_stack(0, true, constant(7.0, &device), true, layer);
        assert!(empty.outputs.is_empty());
        assert_eq!(values(&empty.top)[0], 7.0);
    }

    #[test]
    fn the_residual_gradient_passes_the_output_gradient_to_the_input() {
        let device = Device::flex();
        let (through, of_output) = (constant(3.0, &device), constant(0.5, &device));
        let at = |index, skip| {
            values(&residual_input_gradient(
                index,
                skip,
                through.clone(),
                of_output.clone(),
            ))[0]
        };
        assert_eq!(at(0, true), 3.0);
        assert_eq!(at(1, true), 3.5);
        assert_eq!(at(2, false), 3.0);
    }

    #[test]
    fn both_directions_returns_forward_then_backward() {
        assert_eq!(
            both_directions(false, || "forward", || "backward"),
            ("forward", "backward")
        );
        assert_eq!(
            both_directions(true, || "forward", || "backward"),
            ("forward", "backward")
        );
    }

    /// The directions run on two threads, or on one where rayon's pool has one thread (the
    /// application asked for one core).
    #[test]
    fn both_directions_keep_to_a_pool_of_one_thread() {
        let thread = || std::thread::current().id();
        for (threads, apart) in [(1, false), (2, true), (3, true)] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let (forward, backward) = pool.install(|| both_directions(false, thread, thread));
            assert_eq!(forward != backward, apart, "a pool of {threads}");
        }
    }
}
