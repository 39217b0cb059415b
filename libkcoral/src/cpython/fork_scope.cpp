// ForkScope (fork_scope.hpp).
#include "fork_scope.hpp"

#include <Python.h>

namespace kcoral::cpython {

ForkScope::ForkScope() : gil_state_(PyGILState_Ensure()) { PyOS_BeforeFork(); }

void ForkScope::in_child() {
  PyOS_AfterFork_Child();
  PyGILState_Release(static_cast<PyGILState_STATE>(gil_state_));
  ended_ = true;
}

void ForkScope::in_parent() {
  PyOS_AfterFork_Parent();
  PyGILState_Release(static_cast<PyGILState_STATE>(gil_state_));
  ended_ = true;
}

ForkScope::~ForkScope() {
  if (!ended_) in_parent();
}

}  // namespace kcoral::cpython
