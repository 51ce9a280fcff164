//! Which parameters of a module received a non-zero gradient: the check behind "every parameter
//! is trained", "a frozen biLM gets none" and "the tied softmax hears both directions".

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;

struct NonZero<'a> {
    grads: &'a GradientsParams,
    found: Vec<(String, bool)>,
    path: Vec<String>,
}

impl ModuleVisitor for NonZero<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let nonzero = self
            .grads
            .get::<D>(param.id)
            .is_some_and(|g| g.abs().sum().into_scalar::<f32>() > 0.0);
        self.found.push((self.path.join("."), nonzero));
    }
}

/// `(module path of the parameter's owner, whether its gradient is non-zero)` for every float
/// parameter of `module`, in visiting order.
pub fn nonzero_gradients<M: Module>(module: &M, grads: &GradientsParams) -> Vec<(String, bool)> {
    let mut visitor = NonZero {
        grads,
        found: Vec::new(),
        path: Vec::new(),
    };
    module.visit(&mut visitor);
    visitor.found
}
